// Checks shared by the launchers; each throws Error(KVC_ERR_INVALID_ARGUMENT).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_backend_plugin.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_plugin.h"
#include "plugin_error.hpp"

namespace kvc::cuda {

// The generic attention kernel's lanes hold at most 8 16-byte chunks of a row, 32 lanes a key:
// head_dim 1024 in f32, 2048 in f16 or bf16.
constexpr int32_t kMaxRowChunks = 32 * 8;

// The storage formats of K and V (kvcache_format.h): the kernels read one format without
// scales for both.
inline void check_storage(int32_t head_dim, kvc_dtype k_dtype, kvc_dtype v_dtype) {
  if (head_dim <= 0) fail(KVC_ERR_INVALID_ARGUMENT, "head_dim must be > 0, got %d", head_dim);
  for (kvc_dtype dtype : {k_dtype, v_dtype}) {
    if (!kvc_format_is_valid(dtype))
      fail(KVC_ERR_INVALID_ARGUMENT, "unknown storage dtype %d", int(dtype));
    if (kvc_format_group_size(dtype) != 1)
      fail(KVC_ERR_UNSUPPORTED, "the cuda backend has no kernels for storage format %s",
           kvc_format_name(dtype));
  }
  if (k_dtype != v_dtype)
    fail(KVC_ERR_UNSUPPORTED,
         "the cuda backend stores K and V in one format, not K as %s and V as %s",
         kvc_format_name(k_dtype), kvc_format_name(v_dtype));
  const int32_t per_chunk = int32_t(16 / kvc_format_row_bytes(k_dtype, 1));
  if (head_dim > kMaxRowChunks * per_chunk)
    fail(KVC_ERR_UNSUPPORTED, "head_dim %d is more than the %d this backend's kernels serve in %s",
         head_dim, kMaxRowChunks * per_chunk, kvc_format_name(k_dtype));
}

inline void check_device(kvc_device device, const char* what, size_t job) {
  if (device != KVC_DEVICE_HOST && device != KVC_DEVICE_BACKEND)
    fail(KVC_ERR_INVALID_ARGUMENT, "job %zu: unknown device %d for %s", job, int(device), what);
}

// Segments with formats of their own (ABI 1.6, a head's demoted tier) other than the call's:
// KVC_ERR_UNSUPPORTED (this backend has no convert, so its host never demotes). read_keys
// reads K alone (reads_v false): only its K format is compared.
inline void check_segment_formats(const kvc_segment* segments, int32_t n_segments,
                                  kvc_dtype k_dtype, kvc_dtype v_dtype, bool reads_v,
                                  const char* call, size_t job) {
  for (int32_t s = 0; s < n_segments; ++s) {
    const kvc_segment& segment = segments[s];
    if (segment.own_formats &&
        (segment.k_dtype != k_dtype || (reads_v && segment.v_dtype != v_dtype)))
      fail(KVC_ERR_UNSUPPORTED, "%s job %zu: segment %d holds K %s, V %s, not the call's "
           "formats: the cuda backend does not attend over mixed formats yet", call, job, s,
           kvc_format_name(segment.k_dtype), kvc_format_name(segment.v_dtype));
  }
}

using plugin::Reads;

// The skeleton's count, at most INT32_MAX: the kernels index keys with 32 bits.
inline int32_t count_tokens(const kvc_segment* segments, int32_t n_segments, const char* call,
                            size_t job, Reads reads = Reads::rows_and_positions) {
  const int64_t tokens = plugin::count_segment_tokens(segments, n_segments, call, job, reads);
  if (tokens > INT32_MAX)
    fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: %lld tokens is more than 2^31 - 1", call, job,
         static_cast<long long>(tokens));
  return int32_t(tokens);
}

}  // namespace kvc::cuda
