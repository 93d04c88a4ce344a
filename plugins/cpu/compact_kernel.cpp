#include "compact_kernel.hpp"

#include <cstring>

#include "kvcache/kvcache_format.h"
#include "parallel.hpp"
#include "validation.hpp"

namespace kvc::cpu {
namespace {

// Finds tokens by index across a job's segments, for indices visited in increasing order.
class TokenCursor {
 public:
  explicit TokenCursor(const kvc_segment* segments) : segment_(segments) {}

  // Moves to the token at `index`; returns its offset within segment().
  size_t seek(size_t index) {
    while (index >= first_ + size_t(segment_->count)) first_ += size_t((segment_++)->count);
    return index - first_;
  }
  const kvc_segment& segment() const { return *segment_; }

 private:
  const kvc_segment* segment_;
  size_t first_ = 0;  // index of the segment's first token
};

bool has_own_formats(const kvc_compact_job& job) {
  for (int32_t s = 0; s < job.n_segments; ++s)
    if (job.segments[s].own_formats) return true;
  return false;
}

// A row keeps its bytes when it moves, so it may only move into a segment of its own formats
// (the host compacts each tier of a head within itself).
void check_moves_keep_formats(const kvc_compact_job& job, size_t j, const StorageFormats& call) {
  TokenCursor source(job.segments);
  TokenCursor target(job.segments);
  for (int32_t i = 0; i < job.n_keep; ++i) {
    source.seek(size_t(job.keep[i]));
    target.seek(size_t(i));
    const StorageFormats from = segment_formats(source.segment(), call);
    const StorageFormats to = segment_formats(target.segment(), call);
    if (from != to)
      fail(KVC_ERR_INVALID_ARGUMENT, "compact job %zu: keep[%d] = %d would move a row of K %s, "
           "V %s into index %d, a segment of K %s, V %s", j, i, job.keep[i],
           kvc_format_name(from.k), kvc_format_name(from.v), i, kvc_format_name(to.k),
           kvc_format_name(to.v));
  }
}

void validate(const kvc_compact_job* jobs, size_t n_jobs, int32_t head_dim,
              const StorageFormats& formats) {
  check_storage(head_dim, formats);
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_compact_job& job = jobs[j];
    const size_t tokens = count_tokens(job.segments, job.n_segments, "compact", j);
    check_segment_formats(job.segments, job.n_segments, head_dim, "compact", j);
    if (job.n_keep < 0 || size_t(job.n_keep) > tokens || (job.n_keep > 0 && !job.keep))
      fail(KVC_ERR_INVALID_ARGUMENT, "compact job %zu: bad keep list of %d for %zu tokens", j,
           job.n_keep, tokens);
    for (int32_t i = 0; i < job.n_keep; ++i) {
      const int32_t index = job.keep[i];
      const int64_t lowest = i == 0 ? 0 : int64_t(job.keep[i - 1]) + 1;
      if (index < lowest || size_t(index) >= tokens)
        fail(KVC_ERR_INVALID_ARGUMENT,
             "compact job %zu: keep[%d] = %d is out of range or not increasing", j, i, index);
    }
    if (has_own_formats(job)) check_moves_keep_formats(job, j, formats);
  }
}

// The compact ABI hands over read-only segment pointers and asks the backend to write
// through them.
void move_row(const void* from_rows, size_t from, const void* to_rows, size_t to, size_t bytes) {
  std::memcpy(static_cast<char*>(const_cast<void*>(to_rows)) + to * bytes,
              static_cast<const char*>(from_rows) + from * bytes, bytes);
}

// Statistics are indexed by token index across the segments: token keep[i] becomes token i.
void move_stat(float* stat, const kvc_compact_job& job) {
  if (stat == nullptr) return;
  for (int32_t i = 0; i < job.n_keep; ++i) stat[i] = stat[job.keep[i]];
}

// keep is increasing, so keep[i] >= i: every token moves towards the front, onto a slot
// whose own token has already moved or was dropped.
void compact_job(const kvc_compact_job& job, int32_t head_dim, const StorageFormats& call) {
  TokenCursor source(job.segments);
  TokenCursor target(job.segments);
  for (int32_t i = 0; i < job.n_keep; ++i) {
    const size_t from = source.seek(size_t(job.keep[i]));
    const size_t to = target.seek(size_t(i));
    const kvc_segment& src = source.segment();
    const kvc_segment& dst = target.segment();
    if (&src == &dst && from == to) continue;
    const StorageFormats formats = segment_formats(src, call);  // dst's too (validate)
    move_row(src.k, from, dst.k, to, kvc_format_row_bytes(formats.k, size_t(head_dim)));
    move_row(src.v, from, dst.v, to, kvc_format_row_bytes(formats.v, size_t(head_dim)));
    move_row(src.pos, from, dst.pos, to, sizeof(int32_t));
  }
  move_stat(job.stats.attn_sum, job);
  move_stat(job.stats.attn_last, job);
  move_stat(job.stats.attn_window, job);
}

}  // namespace

void run_compact(const kvc_host_api& host, const kvc_compact_job* jobs, size_t n_jobs,
                 int32_t head_dim, const StorageFormats& formats) {
  validate(jobs, n_jobs, head_dim, formats);
  parallel_for(host, n_jobs, 1, [&](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) compact_job(jobs[j], head_dim, formats);
  });
}

}  // namespace kvc::cpu
