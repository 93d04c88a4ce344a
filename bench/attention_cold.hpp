// Decode attention measured cold and warm (issue 12's method): K/V sets that together pass
// the last-level cache many times over, attended one call per set in turn, so that every call
// reads its K/V from memory; and one set attended again and again, from cache where it fits.
// Beside them, the roofline that bounds decode: read bandwidth or the multiply-add rate.
#pragma once

#include <cstdint>

#include "bandwidth.hpp"
#include "filled_cache.hpp"

namespace kvc_bench {

struct DecodeTimes {
  double cold_seconds = 0;  ///< one decode step over a set, the sets taken in turn (best pass)
  double warm_seconds = 0;  ///< one decode step over the same set again (best call)
  /// One decode step over the same set with a one-key sliding window (best call): the work of
  /// the call that does not scale with the keys read (job and segment lists, dispatch).
  double host_seconds = 0;
  uint64_t set_bytes = 0;   ///< K and V bytes of one set
  int sets = 0;             ///< sets rotated, together at least the requested bytes
  /// With a paired read pass: the median over cold passes of the pass's K/V bytes per second
  /// over the read pass's run right before it (0 without one).
  double cold_paired_fraction = 0;
};

/// Decode steps of `sequences` sequences of `shape` in one batch on every layer, in contexts of
/// `threads` threads (0: all cores): enough sets to hold at least `min_total_bytes` of K/V.
/// With `paired`, each cold pass follows one of its read passes (cold_paired_fraction).
DecodeTimes time_decode(const CacheShape& shape, int32_t sequences, uint64_t min_total_bytes,
                        int threads, int reps, BaselinePasses* paired = nullptr);

/// Multiply-adds a decode step does per byte of K/V it reads. For each key, each of the
/// group = q_heads / kv_heads query heads sharing its KV head takes a head_dim dot product with
/// the K row (its logit) and adds head_dim weighted values of the V row (its output):
/// 2 * group * head_dim multiply-adds over the bytes of a K row and a V row (scales included;
/// for f16 both, 4 * head_dim: group / 2).
/// The softmax and the conversions to f32 are left out, so this is the least work a kernel does.
double decode_macs_per_kv_byte(const CacheShape& shape);

/// The K/V bytes per second a decode step can reach at most: the multiply-add rate allows
/// fma_per_s / decode_macs_per_kv_byte, the memory read_bytes_per_s, the lower of them bounds.
struct DecodeRoofline {
  double compute_bound_bytes_per_s = 0;
  double bytes_per_s = 0;  ///< min(read bandwidth, compute bound)
  /// "compute" when arithmetic is the lower ceiling, else "read".
  const char* limit() const { return bytes_per_s < compute_bound_bytes_per_s ? "read" : "compute"; }
};
DecodeRoofline decode_roofline(const CacheShape& shape, double read_bytes_per_s, double fma_per_s);

}  // namespace kvc_bench
