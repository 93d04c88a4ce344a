// The read loop of the bandwidth baselines: shared so that every figure read "without
// arithmetic" (kvc-bench's read_gbps, kvc-kernel-bench's block and stream reads) is the same
// loop over different memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvc_bench {

// Sums the 64-bit words of [p, p + bytes) with independent accumulators, so the loop is bound
// by loads.
inline uint64_t sum_words(const unsigned char* p, size_t bytes) {
  const auto* w = reinterpret_cast<const uint64_t*>(p);
  const size_t n = bytes / sizeof(uint64_t);
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 += w[i];
    a1 += w[i + 1];
    a2 += w[i + 2];
    a3 += w[i + 3];
    a4 += w[i + 4];
    a5 += w[i + 5];
    a6 += w[i + 6];
    a7 += w[i + 7];
  }
  for (; i < n; ++i) a0 += w[i];
  return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

}  // namespace kvc_bench
