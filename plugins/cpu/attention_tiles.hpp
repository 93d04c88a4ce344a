// What the attention passes share: the shape of a call, which keys a query sees, and the
// walk over stored keys in tiles converted to f32.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kvc/half.hpp"
#include "kvcache/kvcache_plugin.h"
#include "row_convert.hpp"
#include "row_math.hpp"

namespace kvc::cpu {

// Keys converted and scored together: a K and a V tile of 32 rows of f32 stay in L1/L2
// while every query row of a block passes over them.
constexpr size_t kTileKeys = 32;

struct AttentionShape {
  size_t head_dim;
  size_t group_size;
  size_t queries_per_block;
  kvc_dtype storage_dtype;
  float scale;
  int32_t sliding_window;
  float softcap;
  int32_t observation_window;
};

// Positions a query sees: first <= p <= last.
struct VisibleRange {
  int64_t first;
  int64_t last;
  bool contains(int32_t p) const { return first <= p && p <= last; }
};

inline VisibleRange visible_range(int32_t q_pos, int32_t sliding_window) {
  const int64_t first = sliding_window > 0 ? int64_t(q_pos) - sliding_window + 1
                                           : std::numeric_limits<int64_t>::min();
  return {first, q_pos};
}

// K or V rows [first, first + n) of a segment as f32: in place for f32 storage, else
// converted into buffer.
inline const float* tile_f32(const void* rows, size_t first, size_t n, const AttentionShape& s,
                             float* buffer) {
  const size_t row_bytes = s.head_dim * dtype_size(s.storage_dtype);
  const char* base = static_cast<const char*>(rows) + first * row_bytes;
  if (s.storage_dtype == KVC_DTYPE_F32) return reinterpret_cast<const float*>(base);
  for (size_t t = 0; t < n; ++t)
    load_row_f32(base + t * row_bytes, s.storage_dtype, buffer + t * s.head_dim, s.head_dim);
  return buffer;
}

inline float logit(const float* q, const float* k, const AttentionShape& s) {
  const float raw = s.scale * dot(q, k, s.head_dim);
  return s.softcap > 0.0f ? s.softcap * std::tanh(raw / s.softcap) : raw;
}

// Calls visit(segment, first, n_keys) for each tile of up to kTileKeys keys of the job's
// segments, in storage order, skipping tiles that no position in `visible` can see.
template <class Visit>
void for_each_visible_tile(const kvc_attend_job& job, VisibleRange visible, Visit&& visit) {
  for (int32_t si = 0; si < job.n_segments; ++si) {
    const kvc_segment& segment = job.segments[si];
    for (size_t first = 0; first < size_t(segment.count); first += kTileKeys) {
      const size_t n_keys = std::min(kTileKeys, size_t(segment.count) - first);
      const int32_t* pos = segment.pos + first;
      const auto [lowest, highest] = std::minmax_element(pos, pos + n_keys);
      if (*highest < visible.first || *lowest > visible.last) continue;
      visit(segment, first, n_keys);
    }
  }
}

}  // namespace kvc::cpu
