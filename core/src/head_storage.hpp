// The stored tokens of one (sequence, layer, KV head): a list of segments in storage order
// holding K rows, V rows and int32 positions, each region sized for the segment's capacity.
// Paged: blocks of block_tokens, every block but the open one full. Contiguous: one segment
// whose capacity grows by the schedule's rule. Beside the segments, not inside them, one
// array per tracked attention statistic ([stat][stats capacity] floats, one allocation), so
// that K/V blocks can be shared while the statistics of their owners diverge.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "schedule.hpp"

namespace kvc {

inline size_t align_up(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// The rows of one tier of a head: the cache's formats (tier 0) or the demoted ones (tier 1).
struct TierRows {
  kvc_dtype k_dtype = KVC_DTYPE_F32;
  kvc_dtype v_dtype = KVC_DTYPE_F32;
  size_t k_row_bytes = 0;  // one token's K row, of the K format (kvcache_format.h)
  size_t v_row_bytes = 0;  // one token's V row, of the V format
  size_t v_alignment = 1;  // of the V rows' start: K rows of another format may end anywhere
};

struct Geometry {
  kvc_layout layout;
  int32_t head_dim;
  TierRows tiers[2];  // [1]: k_row_bytes 0 when the cache does not demote
  int32_t block_tokens;
  uint32_t stats;  // the attention statistics stored per token (kvc_stat_flags)
  int32_t demoted_block_tokens = 0;  // paged: tier-1 tokens a block holds (0: no demotion)

  int32_t stat_count() const;
  bool demotes() const { return demoted_block_tokens > 0; }
  const TierRows& rows(uint8_t tier = 0) const { return tiers[tier]; }
  // K, V and position of one token.
  size_t token_bytes(uint8_t tier = 0) const {
    return tiers[tier].k_row_bytes + tiers[tier].v_row_bytes + sizeof(int32_t);
  }
  // What one token of `tier` takes against a byte budget (policy.demote): its K, V and
  // position, and its statistics.
  size_t budget_token_bytes(uint8_t tier) const {
    return token_bytes(tier) + static_cast<size_t>(stat_count()) * sizeof(float);
  }
  // A segment of `capacity` tokens holds its K rows, then its V rows, then its positions,
  // each region starting aligned for what it holds.
  size_t v_offset(int32_t capacity, uint8_t tier = 0) const {
    return align_up(static_cast<size_t>(capacity) * tiers[tier].k_row_bytes,
                    tiers[tier].v_alignment);
  }
  size_t pos_offset(int32_t capacity, uint8_t tier = 0) const {
    return align_up(v_offset(capacity, tier) + static_cast<size_t>(capacity) * tiers[tier].v_row_bytes,
                    alignof(int32_t));
  }
  size_t bytes_for(int32_t capacity, uint8_t tier = 0) const {
    return pos_offset(capacity, tier) + static_cast<size_t>(capacity) * sizeof(int32_t);
  }
  // Paged: the tokens of `tier` one block holds.
  int32_t block_capacity(uint8_t tier) const {
    return tier == 0 ? block_tokens : demoted_block_tokens;
  }

  size_t stats_bytes_for(int32_t capacity) const {
    return static_cast<size_t>(capacity) * static_cast<size_t>(stat_count()) * sizeof(float);
  }
};

// The attention statistics that can be stored, in their order in a head's stats array.
constexpr kvc_stat_flags kStoredStats[] = {KVC_STAT_ATTN_SUM, KVC_STAT_ATTN_LAST,
                                           KVC_STAT_ATTN_WINDOW};

struct Segment {
  unsigned char* base;
  int32_t capacity;
  int32_t count;
  uint8_t tier = 0;  // its rows' formats: Geometry::tiers[tier]
};


// What a head needs to fit more tokens: paged blocks, a private copy of a shared open block,
// a new contiguous segment (bigger, or a private copy of a shared one), a bigger statistics
// array (0 / false = none).
struct Growth {
  size_t blocks = 0;
  bool unshare_open_block = false;
  int32_t segment_capacity = 0;
  int32_t stats_capacity = 0;
};

// What a move or an unshare replaced in a head, kept until the call that made it succeeded:
// restore() puts it back, release_replaced() gives it up.
struct Replaced {
  bool segment = false;  // segment `segment_index` was replaced by a copy
  size_t segment_index = 0;
  Segment old_segment{};  // base NULL: the head had no segment before
  bool stats = false;     // the statistics array was replaced by a copy
  float* old_stats = nullptr;
  int32_t old_stats_capacity = 0;
  void* stream = nullptr;  // the copies were queued on it; memory is released on it too
};

// A number no head's table id or version has had before while the library is loaded.
uint64_t new_table_number();

class HeadStorage {
 public:
  int32_t length() const { return length_; }
  // Of length(), the tokens of the demoted tier (tier 1): the first ones in storage order, in
  // segments of their own before those of the cache's formats, each tier in position order.
  int32_t demoted_length() const { return demoted_length_; }
  // The position of the newest stored token (when length() > 0), kept on the host so that no
  // check of an append reads it back from backend memory.
  int32_t newest_position() const { return newest_position_; }
  // Tokens ever appended (a ratio budget is a ratio of these).
  int64_t seen() const { return seen_; }
  // The budget the policy gave this head at its last compression, or -1 before any.
  int32_t effective_budget() const { return effective_budget_; }
  const std::vector<Segment>& segments() const { return segments_; }
  // The identity of this head's segment table and its version, which changes whenever the
  // list gather() gives changes other than in its counts (kvc_attend_job::table_version).
  uint64_t table_id() const { return table_id_; }
  uint64_t table_version() const { return table_version_; }
  // gather()'s segments for attend jobs, kept between calls: rebuilt when the table version
  // moves, and otherwise only the last segment's count is brought up to date (the one count
  // that changes without a new version), so a decode step does not rebuild every head's list.
  // Valid until the head next changes; the caller holds the sequence's lock.
  const std::vector<kvc_segment>& attend_table(const Geometry& g) const;

  // What must be added so that `extra` more tokens fit (contiguous growth and statistics
  // grown by the schedule's factor, or exactly when `exact`); a shared segment that the
  // append would write is copied first.
  Growth growth_for(int32_t extra, const Geometry& g, const Schedule& schedule, bool exact,
                    const BlockPool& pool) const;
  void add_blocks(void* const* blocks, size_t count, const Geometry& g);
  // Paged: the index of the partly filled block new tokens go to.
  size_t open_segment(const Geometry& g) const;

  // Becomes a copy of `source` (an empty head) that shares its K/V segments, each getting one
  // more owner, and owns `stats_memory` (stats_bytes_for(source.stats_capacity()), NULL when no
  // statistics are tracked) holding a copy of its statistics. If the copy fails, the memory is
  // released and this head stays empty.
  void fork_from(const HeadStorage& source, void* stats_memory, Backend& backend, BlockPool& pool,
                 const Geometry& g);
  int32_t stats_capacity() const { return stats_capacity_; }
  // Contiguous: the segment's capacity (0 before the first token).
  int32_t segment_capacity() const { return segments_.empty() ? 0 : segments_.front().capacity; }
  // Indices of the segments other heads share that a write to token slots [first, end)
  // would touch.
  std::vector<size_t> shared_segments(int32_t first, int32_t end, const BlockPool& pool) const;
  // Replaces segment `index` by a private copy in `memory` (of the segment's size); the old
  // one, still owned, goes to the returned Replaced. If the copy fails, `memory` is released
  // and the segment is unchanged.
  Replaced unshare(size_t index, void* memory, Backend& backend, BlockPool& pool,
                   const Geometry& g, void* stream);
  // Moves the tokens into `memory` of `new_capacity`, the old segment going to `replaced`.
  // Returns the bytes copied. If a copy fails, `memory` is released and the head is unchanged.
  // The copies are queued on replaced.stream.
  size_t move_segment_to(void* memory, int32_t new_capacity, Backend& backend, BlockPool& pool,
                         const Geometry& g, Replaced& replaced);
  // The same for the statistics array.
  size_t move_stats_to(void* memory, int32_t new_capacity, Backend& backend, BlockPool& pool,
                       const Geometry& g, Replaced& replaced);
  // Puts back what `replaced` holds (the head's tokens must be those it had then), releasing
  // the copies; or releases what it holds.
  void restore(const Replaced& replaced, BlockPool& pool, const Geometry& g);
  void release_replaced(const Replaced& replaced, BlockPool& pool, const Geometry& g) const;

  // Slots writing head `kv_head` of the tensor rows [first_token, first_token + n) after the
  // stored tokens (capacity must suffice); commit_append() makes them visible once the backend
  // has run them, the last of them at `newest_position`.
  void plan_append(int32_t n, int32_t first_token, int32_t kv_head, const Geometry& g,
                   std::vector<kvc_append_slot>& slots) const;
  void commit_append(int32_t n, int32_t newest_position, const Geometry& g);

  void gather(std::vector<kvc_segment>& out, const Geometry& g) const;
  // The statistics arrays in backend memory (all NULL when none is tracked).
  kvc_head_stats stats(const Geometry& g) const;

  // After the backend moved `kept` tokens to the front, the last of them at `newest_position`:
  // the new counts, and paged blocks left empty go back to the pool.
  void commit_compaction(int32_t kept, int32_t newest_position, BlockPool& pool,
                         const Geometry& g);
  void set_effective_budget(int32_t budget) { effective_budget_ = budget; }
  // Takes `n` tokens off the count of those ever appended (they were removed, not evicted).
  void forget(int32_t n) { seen_ -= n; }
  // An imported head's counters.
  void restore_counters(int64_t seen, int32_t effective_budget) {
    seen_ = seen;
    effective_budget_ = effective_budget;
  }

  // Keeps the first `new_length` tokens, the last of them at `newest_position`; paged blocks
  // left empty go back to the pool.
  void truncate(int32_t new_length, int32_t newest_position, BlockPool& pool, const Geometry& g);
  // Paged: returns empty trailing blocks to the pool.
  void release_empty_blocks(BlockPool& pool, const Geometry& g);
  void release_all(BlockPool& pool, const Geometry& g);
  // The head's tokens become those of `segments` (tier-1 segments first), with this statistics
  // array (stats_bytes_for(stats_capacity), NULL for none), the newest position among them
  // `newest_position`; returns the segments and statistics array it held before, for the
  // caller to release.
  std::pair<std::vector<Segment>, float*> replace_tokens(std::vector<Segment> segments,
                                                         float* stats, int32_t stats_capacity,
                                                         int32_t newest_position);
  // An empty head (release_all) becomes the owner of these segments, with their counts, this
  // statistics array (stats_bytes_for(stats_capacity), NULL for none) and these counters.
  void adopt(std::vector<Segment> segments, float* stats, int32_t stats_capacity, int32_t length,
             int32_t newest_position, int64_t seen, int32_t effective_budget);
  // The whole statistics allocation (NULL when none is tracked).
  float* stats_array() const { return stats_; }

 private:
  // Gives one segment back: a paged block to the free list, a contiguous allocation freed.
  void release_segment(void* base, int32_t capacity, BlockPool& pool, const Geometry& g,
                       void* stream = nullptr) const;

  // A new table version, after a change of the segment list.
  void segments_changed();
  // Sets the demoted tier's counts from the segments' tiers.
  void count_demoted();

  std::vector<Segment> segments_;
  uint64_t table_id_ = new_table_number();
  uint64_t table_version_ = new_table_number();
  mutable std::vector<kvc_segment> attend_table_;
  mutable uint64_t attend_table_version_ = 0;  // the version attend_table_ holds (0: none)
  float* stats_ = nullptr;  // [stat_count][stats_capacity_], backend memory
  int32_t stats_capacity_ = 0;
  int32_t length_ = 0;
  int32_t demoted_length_ = 0;
  size_t demoted_segments_ = 0;  // the tier-1 segments, at the front of segments_
  int32_t newest_position_ = -1;
  int64_t seen_ = 0;
  int32_t effective_budget_ = -1;
};

// The bytes a segment's memory takes: a paged block's whatever its tier, else its capacity's.
inline size_t segment_bytes(const Segment& s, const Geometry& g) {
  return g.layout == KVC_LAYOUT_PAGED ? g.bytes_for(g.block_tokens) : g.bytes_for(s.capacity, s.tier);
}

inline unsigned char* segment_k(const Segment& s) { return s.base; }
inline unsigned char* segment_v(const Segment& s, const Geometry& g) {
  return s.base + g.v_offset(s.capacity, s.tier);
}
inline int32_t* segment_pos(const Segment& s, const Geometry& g) {
  return reinterpret_cast<int32_t*>(s.base + g.pos_offset(s.capacity, s.tier));
}

}  // namespace kvc
