#include "kernels.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "plugin_error.hpp"

#ifdef KVC_CPU_HAVE_AVX2_KERNELS
#include <cpuid.h>
#endif

namespace kvc::cpu {
namespace {

struct KernelSet {
  const TileKernels* kernels;
  // The first CPU feature the set needs that this CPU (or its OS) lacks; null when none.
  const char* (*missing_feature)();
};

const char* nothing_missing() { return nullptr; }

#ifdef KVC_CPU_HAVE_AVX2_KERNELS
// CPUID and XGETBV directly rather than __builtin_cpu_supports, whose "f16c" clang 14 does
// not know. The instructions need the CPU's support and the OS saving their registers.
unsigned xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return lo;
}

const char* missing_for_avx2() {
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

const char* missing_for_avx512() {
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
#endif

// Best first.
const KernelSet kSets[] = {
#ifdef KVC_CPU_HAVE_AVX512_KERNELS
    {&avx512_kernels, missing_for_avx512},
#endif
#ifdef KVC_CPU_HAVE_AVX2_KERNELS
    {&avx2_kernels, missing_for_avx2},
#endif
    {&portable_kernels, nothing_missing},
};

// The set to run, or null with the reason in `refusal`.
struct Choice {
  const TileKernels* kernels = nullptr;
  char refusal[160] = {};
};

Choice choose() {
  Choice choice;
  const char* forced = std::getenv("KVC_CPU_KERNELS");
  if (forced == nullptr || *forced == '\0') {
    for (const KernelSet& set : kSets) {
      if (set.missing_feature() == nullptr) {
        choice.kernels = set.kernels;
        break;
      }
    }
    return choice;
  }
  for (const KernelSet& set : kSets) {
    if (std::strcmp(forced, set.kernels->name) != 0) continue;
    if (const char* missing = set.missing_feature()) {
      std::snprintf(choice.refusal, sizeof choice.refusal,
                    "KVC_CPU_KERNELS=%s: this CPU lacks %s, which the %s kernels need", forced,
                    missing, forced);
    } else {
      choice.kernels = set.kernels;
    }
    return choice;
  }
  int n = std::snprintf(choice.refusal, sizeof choice.refusal,
                        "KVC_CPU_KERNELS=%.40s names no kernel set (known:", forced);
  for (const KernelSet& set : kSets)
    n += std::snprintf(choice.refusal + n, sizeof choice.refusal - size_t(n), " %s",
                       set.kernels->name);
  std::snprintf(choice.refusal + n, sizeof choice.refusal - size_t(n), ")");
  return choice;
}

}  // namespace

const TileKernels& tile_kernels() {
  static const Choice choice = choose();
  if (choice.kernels == nullptr) fail(KVC_ERR_UNSUPPORTED, "%s", choice.refusal);
  return *choice.kernels;
}

}  // namespace kvc::cpu
