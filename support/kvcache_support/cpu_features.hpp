// Which x86 vector sets this CPU and its OS can run, for code that picks its kernels at run
// time: the CPU plugin's tile kernels and the benchmark's FMA baseline ask the same question.
// CPUID and XGETBV directly rather than __builtin_cpu_supports, whose "f16c" clang 14 does not
// know. Each function names the first feature missing, or returns null when none is.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define KVC_SUPPORT_HAVE_X86_FEATURES 1
#include <cpuid.h>

namespace kvc::support {

// XCR0: the register state the OS saves on a context switch; readable only under OSXSAVE.
inline unsigned xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return lo;
}

// AVX2, FMA and F16C with the YMM state saved.
inline const char* missing_for_avx2() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return "CPUID leaf 1";
  if ((ecx & bit_AVX) == 0) return "AVX";
  if ((ecx & bit_FMA) == 0) return "FMA";
  if ((ecx & bit_F16C) == 0) return "F16C";
  if ((ecx & bit_OSXSAVE) == 0 || (xcr0() & 0x6) != 0x6) return "OS support for YMM state";
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || (ebx & bit_AVX2) == 0)
    return "AVX2";
  return nullptr;
}

// The AVX2 set, and AVX-512 F, BW and VL with the opmask and ZMM state saved.
inline const char* missing_for_avx512() {
  if (const char* missing = missing_for_avx2()) return missing;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx);
  if ((ebx & bit_AVX512F) == 0) return "AVX512F";
  if ((ebx & bit_AVX512BW) == 0) return "AVX512BW";
  if ((ebx & bit_AVX512VL) == 0) return "AVX512VL";
  // XCR0 bits 5-7: opmask registers, the upper halves of ZMM0-15, ZMM16-31.
  if ((xcr0() & 0xE6) != 0xE6) return "OS support for opmask and ZMM state";
  return nullptr;
}

}  // namespace kvc::support

#endif
