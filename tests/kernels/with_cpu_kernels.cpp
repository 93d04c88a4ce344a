// kvc-with-cpu-kernels SET PROGRAM [ARG...]: runs PROGRAM with KVC_CPU_KERNELS=SET where this
// CPU runs the CPU backend's SET kernels; elsewhere exits 77, which CTest reports as SKIPPED
// (SKIP_RETURN_CODE), so that a forced rerun of a suite never passes without running.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cpu_sets.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kvc-with-cpu-kernels SET PROGRAM [ARG...]\n");
    return 2;
  }
  const char* set = argv[1];
  const char* lacks = kvt::cpu_lacks_for_kernels(set);
  if (lacks == nullptr) {
    std::fprintf(stderr, "kvc-with-cpu-kernels: %s is not a kernel set\n", set);
    return 2;
  }
  if (*lacks != '\0') {
    std::printf("SKIPPED: this CPU lacks %s, which the %s kernels need\n", lacks, set);
    return 77;
  }
  setenv("KVC_CPU_KERNELS", set, 1);
  execvp(argv[2], argv + 2);
  std::perror("kvc-with-cpu-kernels: exec");
  return 2;
}
