// The tile kernels for CPUs with AVX-512 F, BW and VL (kernels_avx512_body.hpp). Only the
// functions marked KVC_AVX512 are compiled for them, so nothing else in the library can end
// up needing these instructions.
#include "kernels.hpp"

#ifdef KVC_CPU_HAVE_AVX512_KERNELS

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps() (`__m512 __Y = __Y;`), which
// -Wmaybe-uninitialized reports wherever they are inlined (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#define KVC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define KVC_AVX512_INLINE inline __attribute__((target("avx512f,avx512bw,avx512vl"), always_inline))
#define KVC_AVX512_NAMESPACE avx512_native
#include "kernels_avx512_body.hpp"

namespace kvc::cpu {

const TileKernels avx512_kernels = {"avx512", avx512_native::kMaxRowsInPlace,
                                    avx512_native::convert, avx512_native::logits,
                                    avx512_native::accumulate, avx512_native::softmax_weights,
                                    &avx2_quantized_kernels};

}  // namespace kvc::cpu

#endif  // KVC_CPU_HAVE_AVX512_KERNELS
