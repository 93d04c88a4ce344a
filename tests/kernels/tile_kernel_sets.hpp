// The tile kernel sets the kernel tests compare with the double-precision reference: the CPU
// backend's own (kernels.hpp) and its AVX-512 set emulated with SIMDe (avx512_emulated.cpp).
#pragma once

#include "kernels.hpp"

namespace kvc::cpu {

extern const TileKernels emulated_avx512_kernels;

}  // namespace kvc::cpu
