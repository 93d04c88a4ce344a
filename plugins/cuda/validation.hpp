// Checks shared by the launchers; each throws PluginError(KVC_ERR_INVALID_ARGUMENT).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_backend_plugin.hpp"
#include "kvcache/kvcache_plugin.h"
#include "plugin_error.hpp"

namespace kvc::cuda {

inline bool known_dtype(kvc_dtype dtype) {
  return dtype == KVC_DTYPE_F32 || dtype == KVC_DTYPE_F16 || dtype == KVC_DTYPE_BF16;
}

// The generic attention kernel's lanes hold at most 8 16-byte chunks of a row, 32 lanes a key:
// head_dim 1024 in f32, 2048 in f16 or bf16.
constexpr int32_t kMaxRowChunks = 32 * 8;

inline void check_storage(int32_t head_dim, kvc_dtype storage_dtype) {
  if (head_dim <= 0) fail(KVC_ERR_INVALID_ARGUMENT, "head_dim must be > 0, got %d", head_dim);
  if (!known_dtype(storage_dtype))
    fail(KVC_ERR_INVALID_ARGUMENT, "unknown storage dtype %d", int(storage_dtype));
  const int32_t per_chunk = storage_dtype == KVC_DTYPE_F32 ? 4 : 8;
  if (head_dim > kMaxRowChunks * per_chunk)
    fail(KVC_ERR_UNSUPPORTED, "head_dim %d is more than the %d this backend's kernels serve in %s",
         head_dim, kMaxRowChunks * per_chunk, storage_dtype == KVC_DTYPE_F32 ? "f32" : "f16/bf16");
}

inline void check_device(kvc_device device, const char* what, size_t job) {
  if (device != KVC_DEVICE_HOST && device != KVC_DEVICE_BACKEND)
    fail(KVC_ERR_INVALID_ARGUMENT, "job %zu: unknown device %d for %s", job, int(device), what);
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
