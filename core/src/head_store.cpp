#include "head_store.hpp"

#include <algorithm>
#include <cmath>

namespace kvc {
namespace {

// The smallest first allocation of a contiguous segment, so that one-token appends do not
// start with a run of tiny re-allocations.
constexpr int32_t kMinContiguousTokens = 16;

}  // namespace

int32_t Geometry::stat_count() const {
  int32_t n = 0;
  for (kvc_stat_flags flag : kStoredStats) n += (stats & flag) ? 1 : 0;
  return n;
}

float* segment_stat(const Segment& s, const Geometry& g, kvc_stat_flags which) {
  if (!(g.stats & which)) return nullptr;
  auto* region = reinterpret_cast<float*>(segment_pos(s, g) + s.capacity);
  for (kvc_stat_flags flag : kStoredStats) {
    if (flag == which) return region;
    if (g.stats & flag) region += s.capacity;
  }
  return nullptr;
}

int32_t HeadStore::capacity() const {
  int32_t total = 0;
  for (const Segment& s : segments_) total += s.capacity;
  return total;
}

size_t HeadStore::open_segment(const Geometry& g) const {
  if (g.layout == KVC_LAYOUT_CONTIGUOUS) return 0;
  return static_cast<size_t>(length_ / g.block_tokens);
}

size_t HeadStore::blocks_needed(int32_t extra, const Geometry& g) const {
  int64_t missing = static_cast<int64_t>(length_) + extra -
                    static_cast<int64_t>(segments_.size()) * g.block_tokens;
  if (missing <= 0) return 0;
  return static_cast<size_t>((missing + g.block_tokens - 1) / g.block_tokens);
}

void HeadStore::add_blocks(void* const* blocks, size_t count, const Geometry& g) {
  for (size_t i = 0; i < count; ++i) {
    segments_.push_back(Segment{static_cast<unsigned char*>(blocks[i]), g.block_tokens, 0});
  }
}

int32_t HeadStore::capacity_for(int32_t extra, const Geometry& g, bool exact) const {
  int64_t needed = static_cast<int64_t>(length_) + extra;
  int32_t current = segments_.empty() ? 0 : segments_.front().capacity;
  if (needed <= current) return 0;
  if (exact) return static_cast<int32_t>(needed);
  double grown = std::ceil(static_cast<double>(current) * g.growth_factor);
  int64_t target = std::max<int64_t>({needed, static_cast<int64_t>(grown), kMinContiguousTokens});
  return static_cast<int32_t>(std::min<int64_t>(target, INT32_MAX));
}

size_t HeadStore::move_to(void* memory, int32_t new_capacity, Backend& backend, BlockPool& pool,
                          const Geometry& g) {
  Segment moved{static_cast<unsigned char*>(memory), new_capacity, length_};
  size_t copied = 0;
  if (!segments_.empty()) {
    const Segment& old = segments_.front();
    auto copy = [&](void* to, const void* from, size_t bytes) {
      if (bytes == 0) return;
      backend.copy(to, from, bytes, KVC_COPY_DEVICE_TO_DEVICE);
      copied += bytes;
    };
    size_t n = static_cast<size_t>(old.count);
    copy(segment_k(moved), segment_k(old), n * g.row_bytes);
    copy(segment_v(moved, g), segment_v(old, g), n * g.row_bytes);
    copy(segment_pos(moved, g), segment_pos(old, g), n * sizeof(int32_t));
    for (kvc_stat_flags flag : kStoredStats) {
      if (g.stats & flag) copy(segment_stat(moved, g, flag), segment_stat(old, g, flag), n * sizeof(float));
    }
    pool.release(old.base, g.bytes_for(old.capacity));
    segments_.clear();
  }
  segments_.push_back(moved);
  return copied;
}

void HeadStore::plan_append(int32_t n, const AppendSource& source, const Geometry& g,
                            std::vector<kvc_append_job>& jobs) const {
  int32_t written = 0;
  for (size_t i = open_segment(g); written < n && i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    int32_t room = s.capacity - s.count;
    if (room <= 0) continue;
    int32_t take = std::min(room, n - written);
    kvc_append_job job{};
    job.src_k = source.k + written * source.k_stride * source.element_bytes;
    job.src_v = source.v + written * source.v_stride * source.element_bytes;
    job.src_pos = source.pos + written;
    job.src_k_stride = source.k_stride;
    job.src_v_stride = source.v_stride;
    job.src_dtype = source.dtype;
    job.src_device = source.device;
    job.dst_k = segment_k(s) + static_cast<size_t>(s.count) * g.row_bytes;
    job.dst_v = segment_v(s, g) + static_cast<size_t>(s.count) * g.row_bytes;
    job.dst_pos = segment_pos(s, g) + s.count;
    job.n_tokens = take;
    if (float* sum = segment_stat(s, g, KVC_STAT_ATTN_SUM)) job.dst_attn_sum = sum + s.count;
    if (float* last = segment_stat(s, g, KVC_STAT_ATTN_LAST)) job.dst_attn_last = last + s.count;
    if (float* window = segment_stat(s, g, KVC_STAT_ATTN_WINDOW)) job.dst_attn_window = window + s.count;
    jobs.push_back(job);
    written += take;
  }
}

void HeadStore::commit_append(int32_t n, const Geometry& g) {
  int32_t left = n;
  for (size_t i = open_segment(g); left > 0 && i < segments_.size(); ++i) {
    Segment& s = segments_[i];
    int32_t take = std::min(s.capacity - s.count, left);
    s.count += take;
    left -= take;
  }
  length_ += n;
  seen_ += n;
}

void HeadStore::gather(std::vector<kvc_segment>& out, const Geometry& g) const {
  for (const Segment& s : segments_) {
    if (s.count == 0) break;
    out.push_back(kvc_segment{segment_k(s), segment_v(s, g), segment_pos(s, g), s.count,
                              segment_stat(s, g, KVC_STAT_ATTN_SUM),
                              segment_stat(s, g, KVC_STAT_ATTN_LAST),
                              segment_stat(s, g, KVC_STAT_ATTN_WINDOW)});
  }
}

void HeadStore::commit_compaction(int32_t kept, BlockPool& pool, const Geometry& g) {
  int32_t placed = 0;
  for (Segment& s : segments_) {
    s.count = std::min(s.capacity, kept - placed);
    placed += s.count;
  }
  length_ = kept;
  release_empty_blocks(pool, g);
}

void HeadStore::truncate(int32_t new_length, BlockPool& pool, const Geometry& g) {
  int32_t kept = 0;
  for (Segment& s : segments_) {
    s.count = std::clamp(new_length - kept, 0, s.count);
    kept += s.count;
  }
  length_ = kept;
  release_empty_blocks(pool, g);
}

void HeadStore::release_empty_blocks(BlockPool& pool, const Geometry& g) {
  if (g.layout != KVC_LAYOUT_PAGED) return;
  while (!segments_.empty() && segments_.back().count == 0) {
    pool.give_back_block(segments_.back().base);
    segments_.pop_back();
  }
}

void HeadStore::release_all(BlockPool& pool, const Geometry& g) {
  for (const Segment& s : segments_) {
    if (g.layout == KVC_LAYOUT_PAGED) {
      pool.give_back_block(s.base);
    } else {
      pool.release(s.base, g.bytes_for(s.capacity));
    }
  }
  segments_.clear();
  length_ = 0;
}

}  // namespace kvc
