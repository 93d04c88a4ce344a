// The online-softmax pass of attention for a block of query tokens of one job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "attention_tiles.hpp"
#include "kvcache/kvcache_plugin.h"
#include "kvcache/kvcache_rotation.h"

namespace kvc::cpu {

// An allocator of rows that start on a cache line: 32-byte loads of f32 rows are then never
// split across two lines, as every other one is from a 16-byte aligned vector.
template <class T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  template <class U>
  bool operator==(const LineAligned<U>&) const { return true; }
  template <class U>
  bool operator!=(const LineAligned<U>&) const { return false; }
};
using Rows = std::vector<float, LineAligned<float>>;

// Scratch of one thread, reused across blocks. After attend_block it describes that block:
// the output, the merge of split blocks and the statistics pass read its softmax state.
// Rows are (query, group head) pairs; f32 rows are padded_dim apart.
struct AttentionWorkspace {
  explicit AttentionWorkspace(const AttentionShape& s);
  size_t rows() const { return n_queries * group_size; }
  // Whether the workspace was made for a shape with the same row layout.
  bool fits(const AttentionShape& s) const;

  size_t head_dim;  // of the shape it was made for
  size_t padded_dim;
  size_t group_size;
  kvc_rotation k_rotation = KVC_ROTATION_NONE;  // of the call's keys, applied to its queries
  size_t first_query = 0;  // of the block, within the job
  size_t n_queries = 0;
  VisibleRange block_visible{};       // union of the block's visible ranges
  std::vector<VisibleRange> visible;  // [queries_per_block]
  Rows q;                             // [rows, padded_dim]
  // With keys of formats with and without scales, the exact rows of q before rounding.
  Rows q_exact;                       // [rows, padded_dim] or empty
  // The f32 query rows that score keys of `k_dtype` (kvc_format_query_format).
  const float* queries_for(kvc_dtype k_dtype) const {
    return q_exact.empty() || kvc_format_has_scales(k_dtype) ? q.data() : q_exact.data();
  }
  Rows acc;                           // [rows, padded_dim], unnormalised output
  Rows row_max;                       // [rows], running max logit
  Rows row_sum;                       // [rows], softmax denominator relative to row_max
  Rows logits;                        // [rows, kTileKeys], of the current tile
  Rows tile_max;                      // [rows], the largest of each row's logits
  Rows weights;                       // [rows, kTileKeys], exp(logit - row_max)
  // With keys of a format with scales, the block's queries rounded to q8_0 (q then holds
  // their values as f32): QuantizedQueries' arrays.
  std::vector<int8_t> q_values;       // [rows, head_dim]
  std::vector<uint8_t> q_magnitudes;  // [rows, head_dim]
  Rows q_scales;                      // [rows, head_dim / 32]
  std::vector<unsigned char> q_row;   // one query row in q8_0
  QuantizedQueries quantized_queries() const {
    return {q_values.data(), q_magnitudes.data(), q_scales.data(), head_dim};
  }
  Rows k;                             // [kTileKeys, padded_dim], a tile converted to f32
  Rows v;
  const void* k_rows[kTileKeys];      // where tile_rows left the rows of k and v
  const void* v_rows[kTileKeys];
  // With keep_logits set, attend_block leaves every tile's scored logits here, tile i at
  // i * rows() * kTileKeys, for the statistics pass to read instead of scoring again.
  bool keep_logits = false;
  size_t kept_tiles = 0;
  Rows kept_logits;
};

// The calling thread's workspace for `s`, kept across calls: making one per call costs as
// much as a short decode step.
AttentionWorkspace& thread_workspace(const AttentionShape& s);

// The online softmax of queries [first, first + count) of the job (count <=
// queries_per_block) over its keys in `keys`: leaves their state in the workspace.
void attend_block(const kvc_attend_job& job, size_t first, size_t count, KeyRange keys,
                  const AttentionShape& s, AttentionWorkspace& w);

// Sets w.keep_logits for the next attend_block over queries [first, first + count) of the job:
// when `wanted` and the block's tiles' logits (max_tiles of them) take at most kMaxKeptLogits
// floats.
void keep_logits_if(bool wanted, const kvc_attend_job& job, size_t count, const AttentionShape& s,
                    AttentionWorkspace& w);

// Writes the output rows of the block last passed to attend_block.
void write_output(const kvc_attend_job& job, const AttentionShape& s, const AttentionWorkspace& w);

// The logits of every row of the workspace's block for one tile of keys, in w.logits:
// soft-capped, and -infinity where the row's query does not see the key; each row's largest in
// w.tile_max. Asks for `ahead` on the way.
void score_tile(const Tile& tile, const AttentionShape& s, AttentionWorkspace& w,
                Prefetch& ahead);

}  // namespace kvc::cpu
