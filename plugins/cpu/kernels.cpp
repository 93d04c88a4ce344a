#include "kernels.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "plugin_error.hpp"

#ifdef KVC_CPU_HAVE_AVX2_KERNELS
#include "kvcache_support/cpu_features.hpp"
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
using kvc::support::missing_for_avx2;
using kvc::support::missing_for_avx512;
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
