#include "kernels.hpp"

#include <cstdlib>
#include <cstring>

namespace kvc::cpu {
namespace {

const TileKernels& select_kernels() {
  const char* forced = std::getenv("KVC_CPU_KERNELS");
  if (forced != nullptr && std::strcmp(forced, "portable") == 0) return portable_kernels;
#ifdef KVC_CPU_HAVE_AVX2_KERNELS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return avx2_kernels;
#endif
  return portable_kernels;
}

}  // namespace

const TileKernels& tile_kernels() {
  static const TileKernels& chosen = select_kernels();
  return chosen;
}

}  // namespace kvc::cpu
