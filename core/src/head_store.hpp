// The stored tokens of one (sequence, layer, KV head): a list of segments in storage order.
// Paged: blocks of block_tokens, every block but the open one full. Contiguous: one segment
// whose capacity grows by growth_factor. Each segment's memory holds K rows, V rows, int32
// positions, then one float per token for each tracked attention statistic, each region
// sized for the segment's capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"

namespace kvc {

struct Geometry {
  kvc_layout layout;
  int32_t head_dim;
  kvc_dtype dtype;
  size_t row_bytes;  // one token's K (or V) row
  int32_t block_tokens;
  double growth_factor;
  uint32_t stats;  // the attention statistics stored per token (kvc_stat_flags)

  int32_t stat_count() const;
  size_t token_bytes() const {
    return 2 * row_bytes + sizeof(int32_t) + static_cast<size_t>(stat_count()) * sizeof(float);
  }
  size_t bytes_for(int32_t capacity) const { return static_cast<size_t>(capacity) * token_bytes(); }
};

// The attention statistics that live in storage, in their order there.
constexpr kvc_stat_flags kStoredStats[] = {KVC_STAT_ATTN_SUM, KVC_STAT_ATTN_LAST,
                                           KVC_STAT_ATTN_WINDOW};

struct Segment {
  unsigned char* base;
  int32_t capacity;
  int32_t count;
};

// Where new tokens of one KV head come from: row t is at k + t * k_stride elements.
struct AppendSource {
  const unsigned char* k;
  const unsigned char* v;
  size_t k_stride;
  size_t v_stride;
  size_t element_bytes;
  kvc_dtype dtype;
  kvc_device device;
  const int32_t* pos;
};

class HeadStore {
 public:
  int32_t length() const { return length_; }
  // Tokens ever appended (a ratio budget is a ratio of these).
  int64_t seen() const { return seen_; }
  // The budget the policy gave this head at its last compression, or -1 before any.
  int32_t effective_budget() const { return effective_budget_; }
  int32_t capacity() const;
  const std::vector<Segment>& segments() const { return segments_; }

  // Paged: blocks to add so that `extra` more tokens fit.
  size_t blocks_needed(int32_t extra, const Geometry& g) const;
  void add_blocks(void* const* blocks, size_t count, const Geometry& g);

  // Contiguous: the capacity to grow to so that `extra` more tokens fit (grown by the
  // factor, or exactly when `exact`), or 0 when they already fit.
  int32_t capacity_for(int32_t extra, const Geometry& g, bool exact) const;
  // Moves the tokens into `memory` of `new_capacity` and releases the old segment.
  // Returns the bytes copied.
  size_t move_to(void* memory, int32_t new_capacity, Backend& backend, BlockPool& pool,
                 const Geometry& g);

  // Jobs writing `n` tokens from `source` after the stored ones (capacity must suffice);
  // commit_append() makes them visible once the backend has run the jobs.
  void plan_append(int32_t n, const AppendSource& source, const Geometry& g,
                   std::vector<kvc_append_job>& jobs) const;
  void commit_append(int32_t n, const Geometry& g);

  void gather(std::vector<kvc_segment>& out, const Geometry& g) const;

  // After the backend moved `kept` tokens to the front: the new counts, and paged blocks left
  // empty go back to the pool.
  void commit_compaction(int32_t kept, BlockPool& pool, const Geometry& g);
  void set_effective_budget(int32_t budget) { effective_budget_ = budget; }

  // Keeps the first `new_length` tokens; paged blocks left empty go back to the pool.
  void truncate(int32_t new_length, BlockPool& pool, const Geometry& g);
  // Paged: returns empty trailing blocks to the pool.
  void release_empty_blocks(BlockPool& pool, const Geometry& g);
  void release_all(BlockPool& pool, const Geometry& g);

 private:
  size_t open_segment(const Geometry& g) const;

  std::vector<Segment> segments_;
  int32_t length_ = 0;
  int64_t seen_ = 0;
  int32_t effective_budget_ = -1;
};

inline unsigned char* segment_k(const Segment& s) { return s.base; }
inline unsigned char* segment_v(const Segment& s, const Geometry& g) {
  return s.base + static_cast<size_t>(s.capacity) * g.row_bytes;
}
inline int32_t* segment_pos(const Segment& s, const Geometry& g) {
  return reinterpret_cast<int32_t*>(s.base + 2 * static_cast<size_t>(s.capacity) * g.row_bytes);
}
// The statistic's floats in a segment, or NULL when it is not tracked.
float* segment_stat(const Segment& s, const Geometry& g, kvc_stat_flags which);

}  // namespace kvc
