// What the tests expect of the CPU backend's kernel sets on this CPU, found with
// __builtin_cpu_supports (GCC's cpuinfo, which checks the OS's register state too): an
// independent check of the backend's own CPUID/XGETBV dispatch (plugins/cpu/kernels.cpp).
// F16C, which the avx2 and avx512 sets also use, is not asked: clang 14 does not know the
// name, and every CPU with AVX2 has it.
#pragma once

#include <cstring>

namespace kvt {

// The kernel sets, best first: the one the backend picks when KVC_CPU_KERNELS is unset is
// the first this CPU runs.
inline constexpr const char* kKernelSets[] = {"avx512", "avx2", "portable"};

// The first feature `set` needs that this CPU lacks, "" when none, or null for a name that
// is not a set.
inline const char* cpu_lacks_for_kernels(const char* set) {
  __builtin_cpu_init();
  if (std::strcmp(set, "portable") == 0) return "";
  const bool avx2 = std::strcmp(set, "avx2") == 0;
  if (!avx2 && std::strcmp(set, "avx512") != 0) return nullptr;
  if (!__builtin_cpu_supports("avx2")) return "AVX2";
  if (!__builtin_cpu_supports("fma")) return "FMA";
  if (avx2) return "";
  if (!__builtin_cpu_supports("avx512f")) return "AVX512F";
  if (!__builtin_cpu_supports("avx512bw")) return "AVX512BW";
  if (!__builtin_cpu_supports("avx512vl")) return "AVX512VL";
  return "";
}

inline bool cpu_runs_kernels(const char* set) {
  const char* lacks = cpu_lacks_for_kernels(set);
  return lacks != nullptr && *lacks == '\0';
}

}  // namespace kvt
