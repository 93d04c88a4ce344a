#include "append_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "dtype.hpp"
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
              kvc_dtype storage_dtype) {
  check_storage(head_dim, storage_dtype);
  check_jobs(jobs, n_jobs, "append");
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_append_job& job = jobs[j];
    if (job.src_dtype != storage_dtype && job.src_dtype != KVC_DTYPE_F32)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "append job %zu: source dtype %d is neither f32 nor the storage dtype", j,
           int(job.src_dtype));
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

// Source rows of a strided copy are asked for this many rows ahead: rows of one head are
// far apart in the source, too far for the hardware prefetcher to follow.
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

void copy_rows(const void* src, size_t src_stride, kvc_dtype src_dtype, void* dst,
               kvc_dtype storage_dtype, size_t head_dim, size_t n_tokens, bool stream) {
  const size_t dst_row_bytes = head_dim * dtype_size(storage_dtype);
  auto* dst_bytes = static_cast<char*>(dst);
  if (src_dtype == storage_dtype) {
    const size_t src_row_bytes = src_stride * dtype_size(src_dtype);
    if (src_stride == head_dim) {
      copy_bytes(dst, src, n_tokens * dst_row_bytes, stream);
      return;
    }
    const auto* src_bytes = static_cast<const char*>(src);
    for (size_t t = 0; t < n_tokens; ++t) {
      if (stream) prefetch_row(src_bytes + (t + kPrefetchRows) * src_row_bytes, dst_row_bytes);
      copy_bytes(dst_bytes + t * dst_row_bytes, src_bytes + t * src_row_bytes, dst_row_bytes,
                 stream);
    }
    return;
  }
  const auto* src_f32 = static_cast<const float*>(src);
  for (size_t t = 0; t < n_tokens; ++t)
    store_row_f32(src_f32 + t * src_stride, dst_bytes + t * dst_row_bytes, storage_dtype,
                  head_dim);
}

void append_job(const kvc_append_job& job, size_t head_dim, kvc_dtype storage_dtype,
                bool stream) {
  if (job.n_tokens == 0) return;
  const size_t n = size_t(job.n_tokens);
  copy_rows(job.src_k, job.src_k_stride, job.src_dtype, job.dst_k, storage_dtype, head_dim, n,
            stream);
  copy_rows(job.src_v, job.src_v_stride, job.src_dtype, job.dst_v, storage_dtype, head_dim, n,
            stream);
  std::memcpy(job.dst_pos, job.src_pos, n * sizeof(int32_t));
  for (float* stat : {job.dst_stats.attn_sum, job.dst_stats.attn_last, job.dst_stats.attn_window})
    if (stat) std::fill_n(stat, n, 0.0f);
}

// Bytes the jobs store: K and V rows and positions.
size_t stored_bytes(const kvc_append_job* jobs, size_t n_jobs, size_t head_dim,
                    kvc_dtype storage_dtype) {
  size_t tokens = 0;
  for (size_t j = 0; j < n_jobs; ++j) tokens += size_t(jobs[j].n_tokens);
  return tokens * (2 * head_dim * dtype_size(storage_dtype) + sizeof(int32_t));
}

}  // namespace

void run_append(const kvc_host_api& host, const kvc_append_job* jobs, size_t n_jobs,
                int32_t head_dim, kvc_dtype storage_dtype) {
  validate(jobs, n_jobs, head_dim, storage_dtype);
  if (n_jobs == 0) return;
  const size_t dim = size_t(head_dim);
  const size_t bytes = stored_bytes(jobs, n_jobs, dim, storage_dtype);
  const size_t grain = std::max<size_t>(1, kMinChunkBytes / std::max<size_t>(1, bytes / n_jobs));
  const bool stream = bytes >= kStreamBytes;
  parallel_for(host, n_jobs, grain, [&](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) append_job(jobs[j], dim, storage_dtype, stream);
    if (stream) end_streaming();
  });
}

}  // namespace kvc::cpu
