#include "append_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
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
    if (!kvc_format_takes_input(formats.k, job.src_dtype))
      fail(KVC_ERR_INVALID_ARGUMENT, "append job %zu: K's format %s cannot take source dtype %d",
           j, kvc_format_name(formats.k), int(job.src_dtype));
    if (!kvc_format_takes_input(formats.v, job.src_v_dtype))
      fail(KVC_ERR_INVALID_ARGUMENT, "append job %zu: V's format %s cannot take source dtype %d",
           j, kvc_format_name(formats.v), int(job.src_v_dtype));
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

// One head row of a token (`row_bytes` stored), rotated as `rotation` says and converted where
// the source's format is not the storage's.
void copy_row(const void* src, kvc_dtype src_dtype, void* dst, kvc_dtype storage_dtype,
              size_t head_dim, size_t row_bytes, bool stream, kvc_rotation rotation) {
  if (src_dtype == storage_dtype && rotation == KVC_ROTATION_NONE)
    copy_bytes(dst, src, row_bytes, stream);
  else
    store_row(tile_kernels(), src, src_dtype, dst, storage_dtype, head_dim, rotation);
}

void copy_rows(const void* src, size_t src_stride, kvc_dtype src_dtype, void* dst,
               kvc_dtype storage_dtype, size_t head_dim, size_t n_tokens,
               kvc_rotation rotation) {
  const size_t src_row_bytes = kvc_format_row_bytes(src_dtype, src_stride);
  const size_t dst_row_bytes = kvc_format_row_bytes(storage_dtype, head_dim);
  if (rotation == KVC_ROTATION_NONE && src_dtype == storage_dtype && src_stride == head_dim) {
    std::memcpy(dst, src, n_tokens * dst_row_bytes);
    return;
  }
  for (size_t t = 0; t < n_tokens; ++t)
    copy_row(static_cast<const char*>(src) + t * src_row_bytes, src_dtype,
             static_cast<char*>(dst) + t * dst_row_bytes, storage_dtype, head_dim, dst_row_bytes,
             false, rotation);
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
  copy_rows(job.src_k, job.src_k_stride, job.src_dtype, job.dst_k, formats.k, head_dim, n,
            KVC_ROTATION_NONE);
  copy_rows(job.src_v, job.src_v_stride, job.src_v_dtype, job.dst_v, formats.v, head_dim, n,
            KVC_ROTATION_NONE);
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

// Where the slots of each KV head are, in token order: the slots of head h are
// slots[order[starts[h]]], ..., slots[order[starts[h + 1] - 1]].
struct SlotsByHead {
  std::vector<size_t> order;
  std::vector<size_t> starts;
};

SlotsByHead slots_by_head(const kvc_append_slot* slots, size_t n_slots, size_t n_heads) {
  SlotsByHead index;
  index.starts.assign(n_heads + 1, 0);
  for (size_t i = 0; i < n_slots; ++i) ++index.starts[size_t(slots[i].kv_head) + 1];
  for (size_t h = 0; h < n_heads; ++h) index.starts[h + 1] += index.starts[h];
  index.order.resize(n_slots);
  std::vector<size_t> next(index.starts.begin(), index.starts.end() - 1);
  for (size_t i = 0; i < n_slots; ++i) index.order[next[size_t(slots[i].kv_head)]++] = i;
  const auto earlier = [&](size_t a, size_t b) { return slots[a].first_token < slots[b].first_token; };
  for (size_t h = 0; h < n_heads; ++h) {
    const auto begin = index.order.begin() + std::ptrdiff_t(index.starts[h]);
    const auto end = index.order.begin() + std::ptrdiff_t(index.starts[h + 1]);
    if (!std::is_sorted(begin, end, earlier)) std::sort(begin, end, earlier);
  }
  return index;
}

// One of the call's tensors: where element (t, h, 0) is, and where its rows go. The cpu
// backend's formats have groups of one value, so rows lie whole numbers of values apart.
struct Tensor {
  const char* data;
  kvc_dtype dtype;
  size_t token_bytes;  // between tokens
  size_t head_bytes;   // between heads of a token
  size_t token_stride;  // in values
  kvc_dtype storage;
  bool values;  // V: the slots' dst_v, else dst_k
  kvc_rotation rotation;  // applied to each row before it is stored

  Tensor(const void* base, kvc_dtype src, size_t token_values, size_t head_values,
         kvc_dtype stored, bool is_v, kvc_rotation rotate)
      : data(static_cast<const char*>(base)),
        dtype(src),
        token_bytes(kvc_format_row_bytes(src, token_values)),
        head_bytes(kvc_format_row_bytes(src, head_values)),
        token_stride(token_values),
        storage(stored),
        values(is_v),
        rotation(rotate) {}

  const char* row(size_t t, size_t h) const { return data + t * token_bytes + h * head_bytes; }
  char* destination(const kvc_append_slot& slot) const {
    return static_cast<char*>(values ? slot.dst_v : slot.dst_k);
  }
};

// The engine's K is rotated as the cache says; stored rows (k_rotated) already are.
Tensor k_tensor(const kvc_append_tensors_call& call, kvc_rotation k_rotation) {
  return {call.src_k, call.src_k_dtype, call.src_k_token_stride, call.src_k_head_stride,
          call.k_dtype, false, call.k_rotated ? KVC_ROTATION_NONE : k_rotation};
}

Tensor v_tensor(const kvc_append_tensors_call& call) {
  return {call.src_v, call.src_v_dtype, call.src_v_token_stride, call.src_v_head_stride,
          call.v_dtype, true, KVC_ROTATION_NONE};
}

// The rows of one slot.
void copy_slot_rows(const Tensor& tensor, const kvc_append_slot& slot, size_t head_dim) {
  copy_rows(tensor.row(size_t(slot.first_token), size_t(slot.kv_head)), tensor.token_stride,
            tensor.dtype, tensor.destination(slot), tensor.storage, head_dim,
            size_t(slot.n_tokens), tensor.rotation);
}

// Where one head's rows go while the tensor is walked token by token: the slot holding tokens
// [begin, end), its row for the current token at dst once the walk reaches begin.
struct HeadCursor {
  size_t next;  // index into SlotsByHead::order of the slot after this one
  size_t begin, end;
  char* dst;
};

// The cursor of head h at its first slot ending after token t (none: begin = end = SIZE_MAX).
HeadCursor cursor_at(const Tensor& tensor, const kvc_append_slot* slots, const SlotsByHead& index,
                     size_t h, size_t t, size_t first_candidate, size_t dst_row_bytes) {
  size_t c = first_candidate;
  const size_t limit = index.starts[h + 1];
  while (c < limit && size_t(slots[index.order[c]].first_token) +
                              size_t(slots[index.order[c]].n_tokens) <= t)
    ++c;
  if (c == limit) return {limit, SIZE_MAX, SIZE_MAX, nullptr};
  const kvc_append_slot& slot = slots[index.order[c]];
  const size_t first = size_t(slot.first_token);
  const size_t skipped = t > first ? t - first : 0;
  return {c + 1, first, first + size_t(slot.n_tokens),
          tensor.destination(slot) + skipped * dst_row_bytes};
}

// The rows of tokens [begin, end) in the tensor's order: token by token, each token's heads in
// turn, every row to the slot holding it, by non-temporal stores.
void copy_token_rows(const Tensor& tensor, const kvc_append_slot* slots, const SlotsByHead& index,
                     size_t n_heads, size_t head_dim, size_t begin, size_t end) {
  const size_t dst_row_bytes = kvc_format_row_bytes(tensor.storage, head_dim);
  std::vector<HeadCursor> cursors(n_heads);
  for (size_t h = 0; h < n_heads; ++h) {
    const auto first = index.order.begin() + std::ptrdiff_t(index.starts[h]);
    const auto last = index.order.begin() + std::ptrdiff_t(index.starts[h + 1]);
    const size_t candidate = size_t(std::partition_point(first, last, [&](size_t i) {
                                      return size_t(slots[i].first_token) +
                                                 size_t(slots[i].n_tokens) <= begin;
                                    }) - index.order.begin());
    cursors[h] = cursor_at(tensor, slots, index, h, begin, candidate, dst_row_bytes);
  }
  const size_t span = (n_heads - 1) * tensor.head_bytes + kvc_format_row_bytes(tensor.dtype, head_dim);
  for (size_t t = begin; t < end; ++t) {
    if (t + kPrefetchRows < end) prefetch_row(tensor.row(t + kPrefetchRows, 0), span);
    const char* token = tensor.row(t, 0);
    for (size_t h = 0; h < n_heads; ++h) {
      HeadCursor& c = cursors[h];
      if (t >= c.end) c = cursor_at(tensor, slots, index, h, t, c.next, dst_row_bytes);
      if (t < c.begin) continue;  // no slot holds this (token, head)
      copy_row(token + h * tensor.head_bytes, tensor.dtype, c.dst, tensor.storage, head_dim,
               dst_row_bytes, true, tensor.rotation);
      c.dst += dst_row_bytes;
    }
  }
}

// Positions and zeroed statistics of a slot's tokens.
void finish_slot(const kvc_append_slot& slot, const int32_t* positions) {
  const size_t n = size_t(slot.n_tokens);
  std::memcpy(slot.dst_pos, positions + slot.first_token, n * sizeof(int32_t));
  for (float* stat : {slot.dst_stats.attn_sum, slot.dst_stats.attn_last, slot.dst_stats.attn_window})
    if (stat) std::fill_n(stat, n, 0.0f);
}

}  // namespace

void run_append(const kvc_host_api& host, const kvc_append_job* jobs, size_t n_jobs,
                int32_t head_dim, const StorageFormats& formats) {
  validate(jobs, n_jobs, head_dim, formats);
  if (n_jobs == 0) return;
  const size_t dim = size_t(head_dim);
  const size_t bytes = stored_bytes(jobs, n_jobs, dim, formats);
  parallel_for(host, n_jobs, grain_of(bytes, n_jobs), [&](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) append_job(jobs[j], dim, formats);
  });
}

void run_append_tensors(const kvc_host_api& host, const kvc_append_slot* slots,
                        const kvc_append_tensors_call& call, kvc_rotation k_rotation) {
  const StorageFormats formats{call.k_dtype, call.v_dtype};
  check_storage(call.head_dim, formats);
  const size_t n_slots = call.n_slots;
  if (n_slots == 0) return;
  const size_t dim = size_t(call.head_dim), n_heads = size_t(call.n_kv_heads);
  size_t tokens = 0;
  for (size_t i = 0; i < n_slots; ++i) tokens += size_t(slots[i].n_tokens);
  const size_t bytes = tokens * (kvc_format_row_bytes(formats.k, dim) +
                                 kvc_format_row_bytes(formats.v, dim) + sizeof(int32_t));
  const Tensor k = k_tensor(call, k_rotation), v = v_tensor(call);
  if (bytes < kStreamBytes) {
    parallel_for(host, n_slots, grain_of(bytes, n_slots), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        if (slots[i].n_tokens == 0) continue;
        copy_slot_rows(k, slots[i], dim);
        copy_slot_rows(v, slots[i], dim);
        finish_slot(slots[i], call.src_pos);
      }
    });
    return;
  }
  const SlotsByHead index = slots_by_head(slots, n_slots, n_heads);
  const size_t n_tokens = size_t(call.n_tokens);
  parallel_for(host, n_tokens, grain_of(bytes, n_tokens), [&](size_t begin, size_t end) {
    copy_token_rows(k, slots, index, n_heads, dim, begin, end);
    copy_token_rows(v, slots, index, n_heads, dim, begin, end);
    end_streaming();
  });
  parallel_for(host, n_slots, grain_of(bytes, n_slots), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      if (slots[i].n_tokens > 0) finish_slot(slots[i], call.src_pos);
  });
}

}  // namespace kvc::cpu
