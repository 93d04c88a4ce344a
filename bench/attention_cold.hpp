// Decode attention measured cold and warm (issue 12's method): K/V sets that together pass
// the last-level cache many times over, attended one call per set in turn, so that every call
// reads its K/V from memory; and one set attended again and again, from cache where it fits.
#pragma once

#include <cstdint>

#include "filled_cache.hpp"

namespace kvc_bench {

struct DecodeTimes {
  double cold_seconds = 0;  ///< one decode step over a set, the sets taken in turn (best pass)
  double warm_seconds = 0;  ///< one decode step over the same set again (best call)
  uint64_t set_bytes = 0;   ///< K and V bytes of one set
  int sets = 0;             ///< sets rotated, together at least the requested bytes
};

/// Decode steps of `sequences` sequences of `shape` in one batch on every layer, in contexts of
/// `threads` threads (0: all cores): enough sets to hold at least `min_total_bytes` of K/V.
DecodeTimes time_decode(const CacheShape& shape, int32_t sequences, uint64_t min_total_bytes,
                        int threads, int reps);

}  // namespace kvc_bench
