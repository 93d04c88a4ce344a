// What the attention passes share: the shape of a call, which keys a query sees, and the
// walk over stored keys in tiles.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "kernels.hpp"
#include "dtype.hpp"
#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

struct AttentionShape {
  size_t head_dim;
  size_t padded_dim;  // head_dim rounded up to kDimAlign: the stride of f32 rows
  size_t group_size;
  size_t queries_per_block;
  kvc_dtype storage_dtype;
  float scale;
  int32_t sliding_window;
  float softcap;
  int32_t observation_window;
  const TileKernels* kernels;
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

// Keys [first, end) of a job, counted across its segments in storage order.
struct KeyRange {
  size_t first;
  size_t end;
};

// Keys [first, first + n) of one segment, at positions lowest..highest; `key` is the index
// of its first key counted across the job's segments (where its statistics are).
struct Tile {
  const kvc_segment* segment;
  size_t first;
  size_t n;
  int32_t lowest;
  int32_t highest;
  size_t key;
};

// K or V rows of a tile as the kernels read them.
struct TileRows {
  const void* data;
  kvc_dtype dtype;
};

// Where the rows are stored when the kernels can read them there (f32 rows without padding,
// or 16-bit ones for a block of up to max_rows_in_place rows), else converted into buffer as
// f32 rows padded_dim apart (its padding stays zero).
inline TileRows tile_rows(const void* rows, const Tile& tile, size_t block_rows,
                          const AttentionShape& s, float* buffer) {
  const size_t row_bytes = s.head_dim * dtype_size(s.storage_dtype);
  const char* first = static_cast<const char*>(rows) + tile.first * row_bytes;
  if (s.head_dim == s.padded_dim) {
    if (s.storage_dtype == KVC_DTYPE_F32 || block_rows <= s.kernels->max_rows_in_place)
      return {first, s.storage_dtype};
    s.kernels->convert(first, s.storage_dtype, buffer, tile.n * s.head_dim);
    return {buffer, KVC_DTYPE_F32};
  }
  for (size_t t = 0; t < tile.n; ++t)
    s.kernels->convert(first + t * row_bytes, s.storage_dtype, buffer + t * s.padded_dim,
                       s.head_dim);
  return {buffer, KVC_DTYPE_F32};
}

// A tile's K or V rows, to be asked for while the previous tile is computed: decode attention
// streams them from memory, and the blocks of a paged cache are too short for the hardware
// prefetcher to ramp up within each.
inline Prefetch prefetch_rows(const void* rows, const Tile& tile, const AttentionShape& s) {
  const size_t row_bytes = s.head_dim * dtype_size(s.storage_dtype);
  return {static_cast<const char*>(rows) + tile.first * row_bytes, tile.n * row_bytes};
}

// The lowest and highest of n >= 1 positions, by value: std::minmax_element keeps iterators,
// and its loop reloaded through them, each load waiting for the previous compare (a fifth of
// attend_block's own profile samples).
inline std::pair<int32_t, int32_t> position_range(const int32_t* pos, size_t n) {
  int32_t lowest = pos[0], highest = pos[0];
  for (size_t t = 1; t < n; ++t) {
    lowest = std::min(lowest, pos[t]);
    highest = std::max(highest, pos[t]);
  }
  return {lowest, highest};
}

// Calls visit(tile, next) for each tile of up to kTileKeys keys of `keys`, in storage
// order, skipping tiles that no position in `visible` can see; next is the tile visited
// after this one, or null.
template <class Visit>
void for_each_visible_tile(const kvc_attend_job& job, KeyRange keys, VisibleRange visible,
                           Visit&& visit) {
  Tile pending{nullptr, 0, 0, 0, 0, 0};
  size_t segment_first = 0;  // the key index of the segment's first token
  for (int32_t si = 0; si < job.n_segments && segment_first < keys.end; ++si) {
    const kvc_segment& segment = job.segments[si];
    // A block's positions are read before its keys, one tile's compute ahead of them: a
    // cold miss there stalls the whole pass unless it is asked for a segment earlier.
    if (si + 1 < job.n_segments) __builtin_prefetch(job.segments[si + 1].pos);
    const size_t count = size_t(segment.count);
    const size_t begin = std::max(keys.first, segment_first) - segment_first;
    const size_t end = std::min(keys.end, segment_first + count) - segment_first;
    const size_t segment_key = segment_first;
    segment_first += count;
    for (size_t first = begin; first < end; first += kTileKeys) {
      const size_t n = std::min(kTileKeys, end - first);
      const auto [lowest, highest] = position_range(segment.pos + first, n);
      if (highest < visible.first || lowest > visible.last) continue;
      const Tile tile{&segment, first, n, lowest, highest, segment_key + first};
      if (pending.segment) visit(pending, &tile);
      pending = tile;
    }
  }
  if (pending.segment) visit(pending, static_cast<const Tile*>(nullptr));
}

}  // namespace kvc::cpu
