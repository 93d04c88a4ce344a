// What the attention passes share: the shape of a call, which keys a query sees, and the
// walk over stored keys in tiles.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>

#include "kernels.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_plugin.h"
#include "row_convert.hpp"
#include "storage_formats.hpp"

namespace kvc::cpu {

struct AttentionShape {
  size_t head_dim;
  size_t padded_dim;  // head_dim rounded up to kDimAlign: the stride of f32 rows
  size_t group_size;
  size_t queries_per_block;
  kvc_dtype k_dtype;  // the call's storage formats of K and V (a segment may have its own)
  kvc_dtype v_dtype;
  float scale;
  int32_t sliding_window;
  float softcap;
  int32_t observation_window;
  const TileKernels* kernels;
  // The query rows the call's tiles score with (kvc_format_query_format of each K format among
  // its segments): rounded to q8_0 for K of a format with scales, exact for any other.
  bool rounded_queries;
  bool exact_queries;
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

// Up to kTileKeys consecutive keys of a job, from one segment or several of the same formats:
// where each key's K and V rows are stored, their formats, the stretches of memory they fill
// (one per segment) and the keys' positions. Tiles span segments so that short blocks (16
// tokens by default) fill whole tiles: the softmax update, the output's loads and stores and
// the kernels' calls come once per tile, which 16-key tiles paid twice as often. A tile ends
// early where the next segment's formats differ (a head's demoted tier), so that the kernels
// read one format a tile.
// `key` is the index of the first key counted across the job's segments (where its
// statistics are); lowest and highest are the extremes of pos[0, n).
struct Tile {
  size_t n = 0;
  size_t key = 0;
  int32_t lowest = 0;
  int32_t highest = 0;
  kvc_dtype k_dtype = KVC_DTYPE_F32;
  kvc_dtype v_dtype = KVC_DTYPE_F32;
  size_t n_runs = 0;
  const void* k[kTileKeys];
  const void* v[kTileKeys];
  ByteRange k_runs[kTileKeys];
  ByteRange v_runs[kTileKeys];
  int32_t pos[kTileKeys];
};

// K or V rows of a tile as the kernels read them: row t from rows[t].
struct TileRows {
  const void* const* rows;
  kvc_dtype dtype;
};

// The stored rows of `dtype` (tile.k or tile.v) where the kernels can read them (f32 rows
// without padding, or 16-bit ones for a block of up to max_rows_in_place rows), else converted
// into buffer as f32 rows padded_dim apart (its padding stays zero), with `converted` pointing
// at them.
inline TileRows tile_rows(const void* const* stored, kvc_dtype dtype, const Tile& tile,
                          size_t block_rows, const AttentionShape& s, float* buffer,
                          const void** converted) {
  if (s.head_dim == s.padded_dim && !kvc_format_has_scales(dtype) &&
      (dtype == KVC_DTYPE_F32 || block_rows <= s.kernels->max_rows_in_place))
    return {stored, dtype};
  for (size_t t = 0; t < tile.n; ++t) {
    float* row = buffer + t * s.padded_dim;
    load_row_f32(*s.kernels, stored[t], dtype, row, s.head_dim);
    converted[t] = row;
  }
  return {converted, KVC_DTYPE_F32};
}

// A tile's stored K or V rows (its k_runs or v_runs), to be asked for while the previous tile
// is computed: decode attention streams them from memory, and the blocks of a paged cache are
// too short for the hardware prefetcher to ramp up within each.
inline Prefetch prefetch_rows(const ByteRange* runs, const Tile& tile) {
  return {runs, tile.n_runs};
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

// The most tiles for_each_visible_tile makes of a job's keys: every tile is full but the last
// of each run of non-empty segments of the same formats.
inline size_t max_tiles(const kvc_attend_job& job, const AttentionShape& s) {
  const StorageFormats call{s.k_dtype, s.v_dtype};
  size_t tiles = 0, run_keys = 0;
  StorageFormats run = call;
  for (int32_t si = 0; si < job.n_segments; ++si) {
    const kvc_segment& segment = job.segments[si];
    if (segment.count == 0) continue;
    const StorageFormats formats = segment_formats(segment, call);
    if (formats != run) {
      tiles += (run_keys + kTileKeys - 1) / kTileKeys;
      run_keys = 0;
      run = formats;
    }
    run_keys += size_t(segment.count);
  }
  return tiles + (run_keys + kTileKeys - 1) / kTileKeys;
}

// Calls visit(tile, next) for each tile of up to kTileKeys consecutive keys of `keys`, in
// storage order, skipping tiles that no position in `visible` can see; next is the tile
// visited after this one, or null. Every tile is full but the last of `keys` and the last
// before a segment of other formats.
template <class Visit>
void for_each_visible_tile(const kvc_attend_job& job, KeyRange keys, VisibleRange visible,
                           const AttentionShape& s, Visit&& visit) {
  const StorageFormats call{s.k_dtype, s.v_dtype};
  StorageFormats formats = call;
  size_t k_row_bytes = kvc_format_row_bytes(formats.k, s.head_dim);
  size_t v_row_bytes = kvc_format_row_bytes(formats.v, s.head_dim);
  Tile tiles[2];
  Tile* filling = &tiles[0];
  const Tile* pending = nullptr;  // visible, and waiting for the next visible tile
  auto finish = [&] {
    Tile& tile = *filling;
    if (tile.n == 0) return;
    std::tie(tile.lowest, tile.highest) = position_range(tile.pos, tile.n);
    if (tile.highest >= visible.first && tile.lowest <= visible.last) {
      if (pending) visit(*pending, filling);
      pending = filling;
      filling = filling == &tiles[0] ? &tiles[1] : &tiles[0];
    }
    filling->n = 0;
    filling->n_runs = 0;
  };
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
    if (begin >= end) continue;
    // The tile being filled holds keys of `formats` alone: it ends where they change.
    const StorageFormats own = segment_formats(segment, call);
    if (own != formats) {
      finish();
      formats = own;
      k_row_bytes = kvc_format_row_bytes(formats.k, s.head_dim);
      v_row_bytes = kvc_format_row_bytes(formats.v, s.head_dim);
    }
    const char* k = static_cast<const char*>(segment.k);
    const char* v = static_cast<const char*>(segment.v);
    for (size_t first = begin; first < end;) {
      Tile& tile = *filling;
      if (tile.n == 0) {
        tile.key = segment_key + first;
        tile.k_dtype = formats.k;
        tile.v_dtype = formats.v;
      }
      const size_t n = std::min(kTileKeys - tile.n, end - first);
      for (size_t t = 0; t < n; ++t) {
        tile.k[tile.n + t] = k + (first + t) * k_row_bytes;
        tile.v[tile.n + t] = v + (first + t) * v_row_bytes;
      }
      tile.k_runs[tile.n_runs] = {k + first * k_row_bytes, n * k_row_bytes};
      tile.v_runs[tile.n_runs] = {v + first * v_row_bytes, n * v_row_bytes};
      ++tile.n_runs;
      std::copy_n(segment.pos + first, n, tile.pos + tile.n);
      tile.n += n;
      first += n;
      if (tile.n == kTileKeys) finish();
    }
  }
  finish();
  if (pending) visit(*pending, static_cast<const Tile*>(nullptr));
}

}  // namespace kvc::cpu
