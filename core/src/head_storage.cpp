#include "head_storage.hpp"

#include <algorithm>
#include <atomic>
#include <utility>

#include "kvcache/kvcache_format.h"

namespace kvc {

int32_t Geometry::stat_count() const {
  int32_t n = 0;
  for (kvc_stat_flags flag : kStoredStats) n += (stats & flag) ? 1 : 0;
  return n;
}

uint64_t new_table_number() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

void HeadStorage::segments_changed() { table_version_ = new_table_number(); }

size_t HeadStorage::open_segment(const Geometry& g) const {
  if (g.layout == KVC_LAYOUT_CONTIGUOUS) return 0;
  return demoted_segments_ + static_cast<size_t>((length_ - demoted_length_) / g.block_tokens);
}

Growth HeadStorage::growth_for(int32_t extra, const Geometry& g, const Schedule& schedule,
                               bool exact, const BlockPool& pool) const {
  Growth growth;
  const int64_t needed = static_cast<int64_t>(length_) + extra;
  if (g.layout == KVC_LAYOUT_PAGED) {
    const int64_t primary_blocks = static_cast<int64_t>(segments_.size() - demoted_segments_);
    const int64_t missing = needed - demoted_length_ - primary_blocks * g.block_tokens;
    if (missing > 0) growth.blocks = static_cast<size_t>((missing + g.block_tokens - 1) / g.block_tokens);
    const size_t open = open_segment(g);
    growth.unshare_open_block = extra > 0 && open < segments_.size() &&
                                segments_[open].count > 0 && pool.shared(segments_[open].base);
  } else {
    int32_t current = segments_.empty() ? 0 : segments_.front().capacity;
    growth.segment_capacity = schedule.grown_capacity(current, needed, exact);
    if (growth.segment_capacity == 0 && extra > 0 && !segments_.empty() &&
        pool.shared(segments_.front().base)) {
      growth.segment_capacity = current;
    }
  }
  if (g.stat_count() > 0) growth.stats_capacity = schedule.grown_capacity(stats_capacity_, needed, exact);
  return growth;
}

void HeadStorage::add_blocks(void* const* blocks, size_t count, const Geometry& g) {
  for (size_t i = 0; i < count; ++i) {
    segments_.push_back(Segment{static_cast<unsigned char*>(blocks[i]), g.block_tokens, 0});
  }
}

size_t HeadStorage::move_segment_to(void* memory, int32_t new_capacity, Backend& backend,
                                    BlockPool& pool, const Geometry& g, Replaced& replaced) {
  Segment moved{static_cast<unsigned char*>(memory), new_capacity, length_};
  size_t copied = 0;
  if (!segments_.empty()) {
    const Segment& old = segments_.front();
    const size_t n = static_cast<size_t>(old.count);
    try {
      backend.copy(segment_k(moved), segment_k(old), n * g.rows().k_row_bytes,
                   KVC_COPY_DEVICE_TO_DEVICE, replaced.stream);
      backend.copy(segment_v(moved, g), segment_v(old, g), n * g.rows().v_row_bytes,
                   KVC_COPY_DEVICE_TO_DEVICE, replaced.stream);
      backend.copy(segment_pos(moved, g), segment_pos(old, g), n * sizeof(int32_t),
                   KVC_COPY_DEVICE_TO_DEVICE, replaced.stream);
    } catch (...) {
      pool.release(memory, g.bytes_for(new_capacity), replaced.stream);
      throw;
    }
    copied = n * g.token_bytes();
    replaced.old_segment = old;
    segments_.clear();
  }
  replaced.segment = true;
  replaced.segment_index = 0;
  segments_.push_back(moved);
  segments_changed();
  return copied;
}

size_t HeadStorage::move_stats_to(void* memory, int32_t new_capacity, Backend& backend,
                                  BlockPool& pool, const Geometry& g, Replaced& replaced) {
  auto* moved = static_cast<float*>(memory);
  const size_t n = static_cast<size_t>(length_);
  const int32_t count = g.stat_count();
  size_t copied = 0;
  if (stats_) {
    try {
      for (int32_t i = 0; i < count && n > 0; ++i) {
        backend.copy(moved + static_cast<size_t>(i) * new_capacity,
                     stats_ + static_cast<size_t>(i) * stats_capacity_, n * sizeof(float),
                     KVC_COPY_DEVICE_TO_DEVICE, replaced.stream);
      }
    } catch (...) {
      pool.release(memory, g.stats_bytes_for(new_capacity), replaced.stream);
      throw;
    }
    copied = n * sizeof(float) * static_cast<size_t>(count);
  }
  replaced.stats = true;
  replaced.old_stats = stats_;
  replaced.old_stats_capacity = stats_capacity_;
  stats_ = moved;
  stats_capacity_ = new_capacity;
  return copied;
}

void HeadStorage::restore(const Replaced& replaced, BlockPool& pool, const Geometry& g) {
  if (replaced.stats) {
    pool.release(stats_, g.stats_bytes_for(stats_capacity_), replaced.stream);
    stats_ = replaced.old_stats;
    stats_capacity_ = replaced.old_stats_capacity;
  }
  if (replaced.segment) {
    const auto at = segments_.begin() + static_cast<std::ptrdiff_t>(replaced.segment_index);
    release_segment(at->base, at->capacity, pool, g, replaced.stream);
    if (replaced.old_segment.base) {
      *at = replaced.old_segment;
    } else {
      segments_.erase(at);
    }
    segments_changed();
  }
}

void HeadStorage::release_replaced(const Replaced& replaced, BlockPool& pool,
                                   const Geometry& g) const {
  if (replaced.stats && replaced.old_stats) {
    pool.release(replaced.old_stats, g.stats_bytes_for(replaced.old_stats_capacity),
                 replaced.stream);
  }
  if (replaced.segment && replaced.old_segment.base) {
    release_segment(replaced.old_segment.base, replaced.old_segment.capacity, pool, g,
                    replaced.stream);
  }
}

kvc_head_stats HeadStorage::stats(const Geometry& g) const {
  kvc_head_stats out{};
  if (!stats_) return out;
  float* region = stats_;
  float** targets[] = {&out.attn_sum, &out.attn_last, &out.attn_window};
  for (size_t i = 0; i < std::size(kStoredStats); ++i) {
    if (!(g.stats & kStoredStats[i])) continue;
    *targets[i] = region;
    region += stats_capacity_;
  }
  return out;
}

void HeadStorage::plan_append(int32_t n, int32_t first_token, int32_t kv_head, const Geometry& g,
                              std::vector<kvc_append_slot>& slots) const {
  const kvc_head_stats head_stats = stats(g);
  auto at = [](float* stat, int32_t index) { return stat ? stat + index : nullptr; };
  int32_t written = 0;
  for (size_t i = open_segment(g); written < n && i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    int32_t room = s.capacity - s.count;
    if (room <= 0) continue;
    int32_t take = std::min(room, n - written);
    kvc_append_slot slot{};
    slot.struct_size = sizeof(slot);
    slot.first_token = first_token + written;
    slot.n_tokens = take;
    slot.kv_head = kv_head;
    slot.dst_k = segment_k(s) + static_cast<size_t>(s.count) * g.rows().k_row_bytes;
    slot.dst_v = segment_v(s, g) + static_cast<size_t>(s.count) * g.rows().v_row_bytes;
    slot.dst_pos = segment_pos(s, g) + s.count;
    const int32_t index = length_ + written;
    slot.dst_stats = kvc_head_stats{at(head_stats.attn_sum, index),
                                    at(head_stats.attn_last, index),
                                    at(head_stats.attn_window, index)};
    slots.push_back(slot);
    written += take;
  }
}

void HeadStorage::commit_append(int32_t n, int32_t newest_position, const Geometry& g) {
  int32_t left = n;
  bool opened = false;  // a segment gather() skipped, being empty, now has tokens
  for (size_t i = open_segment(g); left > 0 && i < segments_.size(); ++i) {
    Segment& s = segments_[i];
    int32_t take = std::min(s.capacity - s.count, left);
    opened |= s.count == 0 && take > 0;
    s.count += take;
    left -= take;
  }
  if (opened) segments_changed();
  length_ += n;
  seen_ += n;
  if (n > 0) newest_position_ = newest_position;
}

void HeadStorage::gather(std::vector<kvc_segment>& out, const Geometry& g) const {
  for (const Segment& s : segments_) {
    if (s.count == 0) break;
    const TierRows& rows = g.rows(s.tier);
    out.push_back(kvc_segment{sizeof(kvc_segment), s.count, segment_k(s), segment_v(s, g),
                              segment_pos(s, g), s.tier, rows.k_dtype, rows.v_dtype});
  }
}

const std::vector<kvc_segment>& HeadStorage::attend_table(const Geometry& g) const {
  if (attend_table_version_ != table_version_) {
    attend_table_.clear();
    gather(attend_table_, g);
    attend_table_version_ = table_version_;
  } else if (!attend_table_.empty()) {
    attend_table_.back().count = segments_[attend_table_.size() - 1].count;
  }
  return attend_table_;
}

void HeadStorage::commit_compaction(int32_t kept, int32_t newest_position, BlockPool& pool,
                                    const Geometry& g) {
  int32_t placed = 0;
  for (Segment& s : segments_) {
    s.count = std::min(s.capacity, kept - placed);
    placed += s.count;
  }
  length_ = kept;
  newest_position_ = newest_position;
  release_empty_blocks(pool, g);
  segments_changed();
}

void HeadStorage::truncate(int32_t new_length, int32_t newest_position, BlockPool& pool,
                           const Geometry& g) {
  int32_t kept = 0;
  for (Segment& s : segments_) {
    s.count = std::clamp(new_length - kept, 0, s.count);
    kept += s.count;
  }
  length_ = kept;
  newest_position_ = newest_position;
  release_empty_blocks(pool, g);
  count_demoted();
  segments_changed();
}

void HeadStorage::release_empty_blocks(BlockPool& pool, const Geometry& g) {
  if (g.layout != KVC_LAYOUT_PAGED) return;
  while (!segments_.empty() && segments_.back().count == 0) {
    pool.give_back_block(segments_.back().base);
    segments_.pop_back();
  }
}

void HeadStorage::release_segment(void* base, int32_t capacity, BlockPool& pool,
                                  const Geometry& g, void* stream) const {
  if (g.layout == KVC_LAYOUT_PAGED) {
    pool.give_back_block(base);
  } else {
    pool.release(base, g.bytes_for(capacity), stream);
  }
}

void HeadStorage::fork_from(const HeadStorage& source, void* stats_memory, Backend& backend,
                            BlockPool& pool, const Geometry& g) {
  if (stats_memory) {
    const size_t bytes = g.stats_bytes_for(source.stats_capacity_);
    try {
      backend.copy(stats_memory, source.stats_, bytes, KVC_COPY_DEVICE_TO_DEVICE);
    } catch (...) {
      pool.release(stats_memory, bytes);
      throw;
    }
    stats_ = static_cast<float*>(stats_memory);
    stats_capacity_ = source.stats_capacity_;
  }
  for (const Segment& s : source.segments_) {
    if (s.count == 0) break;
    pool.share(s.base, segment_bytes(s, g));
    segments_.push_back(s);
  }
  segments_changed();
  length_ = source.length_;
  demoted_length_ = source.demoted_length_;
  demoted_segments_ = source.demoted_segments_;
  newest_position_ = source.newest_position_;
  seen_ = source.seen_;
  effective_budget_ = source.effective_budget_;
}

std::vector<size_t> HeadStorage::shared_segments(int32_t first, int32_t end,
                                                 const BlockPool& pool) const {
  std::vector<size_t> out;
  int32_t segment_first = 0;
  for (size_t i = 0; i < segments_.size() && segment_first < end; ++i) {
    const Segment& s = segments_[i];
    // A demoted segment's slots end at its count: the next one starts there.
    const int32_t segment_end = segment_first + (s.tier == 0 ? s.capacity : s.count);
    if (segment_end > first && pool.shared(segments_[i].base)) out.push_back(i);
    segment_first = segment_end;
  }
  return out;
}

Replaced HeadStorage::unshare(size_t index, void* memory, Backend& backend, BlockPool& pool,
                              const Geometry& g, void* stream) {
  Segment& s = segments_[index];
  try {
    backend.copy(memory, s.base, g.bytes_for(s.capacity, s.tier), KVC_COPY_DEVICE_TO_DEVICE, stream);
  } catch (...) {
    release_segment(memory, s.capacity, pool, g, stream);
    throw;
  }
  Replaced replaced;
  replaced.stream = stream;
  replaced.segment = true;
  replaced.segment_index = index;
  replaced.old_segment = s;
  s.base = static_cast<unsigned char*>(memory);
  segments_changed();
  return replaced;
}

void HeadStorage::adopt(std::vector<Segment> segments, float* stats, int32_t stats_capacity,
                        int32_t length, int32_t newest_position, int64_t seen,
                        int32_t effective_budget) {
  segments_ = std::move(segments);
  segments_changed();
  stats_ = stats;
  stats_capacity_ = stats_capacity;
  length_ = length;
  count_demoted();
  newest_position_ = newest_position;
  seen_ = seen;
  effective_budget_ = effective_budget;
}

std::pair<std::vector<Segment>, float*> HeadStorage::replace_tokens(
    std::vector<Segment> segments, float* stats, int32_t stats_capacity, int32_t newest_position) {
  std::pair<std::vector<Segment>, float*> old{std::move(segments_), stats_};
  segments_ = std::move(segments);
  segments_changed();
  stats_ = stats;
  stats_capacity_ = stats_capacity;
  length_ = 0;
  for (const Segment& s : segments_) length_ += s.count;
  count_demoted();
  newest_position_ = newest_position;
  return old;
}

void HeadStorage::count_demoted() {
  demoted_length_ = 0;
  demoted_segments_ = 0;
  for (const Segment& s : segments_) {
    if (s.tier == 0) break;
    demoted_length_ += s.count;
    ++demoted_segments_;
  }
}

void HeadStorage::release_all(BlockPool& pool, const Geometry& g) {
  for (const Segment& s : segments_) release_segment(s.base, s.capacity, pool, g);
  segments_.clear();
  segments_changed();
  if (stats_) pool.release(stats_, g.stats_bytes_for(stats_capacity_));
  stats_ = nullptr;
  stats_capacity_ = 0;
  length_ = 0;
  demoted_length_ = 0;
  demoted_segments_ = 0;
  newest_position_ = -1;
}

}  // namespace kvc
