#include "append_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <vector>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kvcache/kvcache_format.h"
#include "parallel.hpp"
#include "row_convert.hpp"
#include "validation.hpp"

namespace kvc::cpu {
namespace {

// Jobs are often a single decode token; batching them keeps the arena's per-chunk cost small.
constexpr size_t kMinChunkBytes = size_t{64} << 10;
// Calls that store more than this copy rows with non-temporal stores: the caches could not
// keep them for the attention that follows anyway, and streaming skips reading each
// destination line before overwriting it, which scattered rows would otherwise pay in full.
constexpr size_t kStreamBytes = size_t{4} << 20;

void validate(const kvc_append_job* jobs, size_t n_jobs, int32_t head_dim,
              const StorageFormats& formats) {
  check_storage(head_dim, formats);
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_append_job& job = jobs[j];
    if (job.src_dtype != formats.k && job.src_dtype != KVC_DTYPE_F32)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "append job %zu: source dtype %d is neither f32 nor the storage dtype of K", j,
           int(job.src_dtype));
    if (job.src_v_dtype != formats.v && job.src_v_dtype != KVC_DTYPE_F32)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "append job %zu: source dtype %d of V is neither f32 nor the storage dtype of V", j,
           int(job.src_v_dtype));
    if (job.n_tokens < 0)
      fail(KVC_ERR_INVALID_ARGUMENT, "append job %zu: negative n_tokens %d", j, job.n_tokens);
  }
}

// dst[0, n) = src[0, n); with `stream`, by non-temporal stores where dst and n allow.
void copy_bytes(void* dst, const void* src, size_t n, bool stream) {
#ifdef __SSE2__
  if (stream && reinterpret_cast<uintptr_t>(dst) % 16 == 0 && n % 16 == 0) {
    auto* to = static_cast<__m128i*>(dst);
    const auto* from = static_cast<const __m128i*>(src);
    for (size_t i = 0; i < n / 16; ++i) _mm_stream_si128(to + i, _mm_loadu_si128(from + i));
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

// Source rows are asked for this many tokens ahead: a group's heads may be only part of each
// token's row, and the hardware prefetcher does not follow such strided rows far enough.
constexpr size_t kPrefetchRows = 8;

void prefetch_row(const char* row, size_t bytes) {
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(row + offset);
}

// Makes the non-temporal stores of this thread visible before the host reads the rows.
void end_streaming() {
#ifdef __SSE2__
  _mm_sfence();
#endif
}

// One head row of a token, converted from f32 where the source is f32.
void copy_row(const void* src, kvc_dtype src_dtype, void* dst, kvc_dtype storage_dtype,
              size_t head_dim, bool stream) {
  if (src_dtype == storage_dtype)
    copy_bytes(dst, src, kvc_format_row_bytes(storage_dtype, head_dim), stream);
  else
    store_row_f32(static_cast<const float*>(src), dst, storage_dtype, head_dim);
}

void copy_rows(const void* src, size_t src_stride, kvc_dtype src_dtype, void* dst,
               kvc_dtype storage_dtype, size_t head_dim, size_t n_tokens) {
  const size_t src_row_bytes = kvc_format_row_bytes(src_dtype, src_stride);
  const size_t dst_row_bytes = kvc_format_row_bytes(storage_dtype, head_dim);
  if (src_dtype == storage_dtype && src_stride == head_dim) {
    std::memcpy(dst, src, n_tokens * dst_row_bytes);
    return;
  }
  for (size_t t = 0; t < n_tokens; ++t)
    copy_row(static_cast<const char*>(src) + t * src_row_bytes, src_dtype,
             static_cast<char*>(dst) + t * dst_row_bytes, storage_dtype, head_dim, false);
}

// Positions and zeroed statistics of a job's tokens.
void finish_job(const kvc_append_job& job) {
  const size_t n = size_t(job.n_tokens);
  std::memcpy(job.dst_pos, job.src_pos, n * sizeof(int32_t));
  for (float* stat : {job.dst_stats.attn_sum, job.dst_stats.attn_last, job.dst_stats.attn_window})
    if (stat) std::fill_n(stat, n, 0.0f);
}

void append_job(const kvc_append_job& job, size_t head_dim, const StorageFormats& formats) {
  if (job.n_tokens == 0) return;
  const size_t n = size_t(job.n_tokens);
  copy_rows(job.src_k, job.src_k_stride, job.src_dtype, job.dst_k, formats.k, head_dim, n);
  copy_rows(job.src_v, job.src_v_stride, job.src_v_dtype, job.dst_v, formats.v, head_dim, n);
  finish_job(job);
}

// Work items of a parallel chunk: enough for kMinChunkBytes of the call's `bytes`.
size_t grain_of(size_t bytes, size_t items) {
  return std::max<size_t>(1, kMinChunkBytes / std::max<size_t>(1, bytes / items));
}

// Bytes the jobs store: K and V rows and positions.
size_t stored_bytes(const kvc_append_job* jobs, size_t n_jobs, size_t head_dim,
                    const StorageFormats& formats) {
  size_t tokens = 0;
  for (size_t j = 0; j < n_jobs; ++j) tokens += size_t(jobs[j].n_tokens);
  return tokens * (kvc_format_row_bytes(formats.k, head_dim) +
                   kvc_format_row_bytes(formats.v, head_dim) + sizeof(int32_t));
}

// Whether job b copies the same tokens as job a from the head next to a's: its source rows
// start one head row after a's, alike in count, strides and dtype.
bool next_head(const kvc_append_job& a, const kvc_append_job& b, size_t head_dim) {
  return b.n_tokens == a.n_tokens && b.src_dtype == a.src_dtype &&
         b.src_v_dtype == a.src_v_dtype && b.src_k_stride == a.src_k_stride &&
         b.src_v_stride == a.src_v_stride &&
         static_cast<const char*>(b.src_k) ==
             static_cast<const char*>(a.src_k) + kvc_format_row_bytes(a.src_dtype, head_dim) &&
         static_cast<const char*>(b.src_v) ==
             static_cast<const char*>(a.src_v) + kvc_format_row_bytes(a.src_v_dtype, head_dim);
}

// The jobs in source order, cut into groups of neighbouring heads (next_head): the engine's
// rows hold every head of a token side by side, and jobs come per head, so copying a group
// token by token reads the source in order where job by job would sweep it once per head.
struct HeadGroups {
  std::vector<const kvc_append_job*> jobs;
  std::vector<size_t> starts;  // group g is jobs [starts[g], starts[g + 1])
};

HeadGroups head_groups(const kvc_append_job* jobs, size_t n_jobs, size_t head_dim) {
  HeadGroups groups;
  groups.jobs.reserve(n_jobs);
  for (size_t j = 0; j < n_jobs; ++j)
    if (jobs[j].n_tokens > 0) groups.jobs.push_back(&jobs[j]);
  std::sort(groups.jobs.begin(), groups.jobs.end(), [](const auto* a, const auto* b) {
    return std::less<const void*>()(a->src_k, b->src_k);
  });
  for (size_t j = 0; j < groups.jobs.size(); ++j)
    if (j == 0 || !next_head(*groups.jobs[j - 1], *groups.jobs[j], head_dim))
      groups.starts.push_back(j);
  groups.starts.push_back(groups.jobs.size());
  return groups;
}

// K (or V) rows of a group, token by token; the group's sources of one token are contiguous.
void copy_group_rows(const kvc_append_job* const* group, size_t n_heads, bool values,
                     size_t head_dim, kvc_dtype storage_dtype) {
  const kvc_append_job& first = *group[0];
  const kvc_dtype src_dtype = values ? first.src_v_dtype : first.src_dtype;
  const size_t src_row_bytes =
      kvc_format_row_bytes(src_dtype, values ? first.src_v_stride : first.src_k_stride);
  const size_t span = n_heads * kvc_format_row_bytes(src_dtype, head_dim);
  const size_t dst_row_bytes = kvc_format_row_bytes(storage_dtype, head_dim);
  const size_t n_tokens = size_t(first.n_tokens);
  const auto source = [&](size_t h) {
    return static_cast<const char*>(values ? group[h]->src_v : group[h]->src_k);
  };
  for (size_t t = 0; t < n_tokens; ++t) {
    if (t + kPrefetchRows < n_tokens)
      prefetch_row(source(0) + (t + kPrefetchRows) * src_row_bytes, span);
    for (size_t h = 0; h < n_heads; ++h) {
      char* dst = static_cast<char*>(values ? group[h]->dst_v : group[h]->dst_k);
      copy_row(source(h) + t * src_row_bytes, src_dtype, dst + t * dst_row_bytes,
               storage_dtype, head_dim, true);
    }
  }
}

void append_group(const kvc_append_job* const* group, size_t n_heads, size_t head_dim,
                  const StorageFormats& formats) {
  copy_group_rows(group, n_heads, false, head_dim, formats.k);
  copy_group_rows(group, n_heads, true, head_dim, formats.v);
  for (size_t h = 0; h < n_heads; ++h) finish_job(*group[h]);
}

}  // namespace

void run_append(const kvc_host_api& host, const kvc_append_job* jobs, size_t n_jobs,
                int32_t head_dim, const StorageFormats& formats) {
  validate(jobs, n_jobs, head_dim, formats);
  if (n_jobs == 0) return;
  const size_t dim = size_t(head_dim);
  const size_t bytes = stored_bytes(jobs, n_jobs, dim, formats);
  if (bytes < kStreamBytes) {
    parallel_for(host, n_jobs, grain_of(bytes, n_jobs), [&](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) append_job(jobs[j], dim, formats);
    });
    return;
  }
  const HeadGroups groups = head_groups(jobs, n_jobs, dim);
  const size_t n_groups = groups.starts.size() - 1;
  parallel_for(host, n_groups, grain_of(bytes, n_groups), [&](size_t begin, size_t end) {
    for (size_t g = begin; g < end; ++g)
      append_group(groups.jobs.data() + groups.starts[g], groups.starts[g + 1] - groups.starts[g],
                   dim, formats);
    end_streaming();
  });
}

}  // namespace kvc::cpu
