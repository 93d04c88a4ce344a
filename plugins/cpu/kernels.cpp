#include "kernels.hpp"

#include <cstdlib>
#include <cstring>

#ifdef KVC_CPU_HAVE_AVX2_KERNELS
#include <cpuid.h>
#endif

namespace kvc::cpu {
namespace {

#ifdef KVC_CPU_HAVE_AVX2_KERNELS
// CPUID and XGETBV directly rather than __builtin_cpu_supports, whose "f16c" clang 14 does
// not know. The instructions need the CPU's support and the OS saving the YMM registers.
bool cpu_has_avx2_fma_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const unsigned needed = bit_AVX | bit_FMA | bit_F16C | bit_OSXSAVE;
  if ((ecx & needed) != needed) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6) != 0x6) return false;  // XMM and YMM state enabled by the OS
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ebx & bit_AVX2) != 0;
}
#endif

const TileKernels& select_kernels() {
  const char* forced = std::getenv("KVC_CPU_KERNELS");
  if (forced != nullptr && std::strcmp(forced, "portable") == 0) return portable_kernels;
#ifdef KVC_CPU_HAVE_AVX2_KERNELS
  if (cpu_has_avx2_fma_f16c()) return avx2_kernels;
#endif
  return portable_kernels;
}

}  // namespace

const TileKernels& tile_kernels() {
  static const TileKernels& chosen = select_kernels();
  return chosen;
}

}  // namespace kvc::cpu
