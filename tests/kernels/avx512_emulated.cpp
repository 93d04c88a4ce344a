// The AVX-512 tile kernels of the CPU backend compiled, unchanged, against SIMDe's portable
// implementations of the intrinsics, so that their logic is tested on any CPU.
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include "simde_avx512_gaps.hpp"

#define KVC_AVX512
#define KVC_AVX512_INLINE inline __attribute__((always_inline))
#define KVC_AVX512_NAMESPACE avx512_emulated
#include "kernels_avx512_body.hpp"

#include "tile_kernel_sets.hpp"

namespace kvc::cpu {

const TileKernels emulated_avx512_kernels = {
    "avx512 (SIMDe)",          avx512_emulated::kMaxRowsInPlace, avx512_emulated::convert,
    avx512_emulated::logits,   avx512_emulated::accumulate,      avx512_emulated::softmax_weights,
    nullptr};

}  // namespace kvc::cpu
