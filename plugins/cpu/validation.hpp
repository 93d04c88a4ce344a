// Checks shared by the kernels; each throws PluginError(KVC_ERR_INVALID_ARGUMENT).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_plugin.h"
#include "plugin_error.hpp"

namespace kvc::cpu {

// The storage formats of a call's K and V rows (kvcache_format.h).
struct StorageFormats {
  kvc_dtype k;
  kvc_dtype v;
};

inline void check_storage(int32_t head_dim, kvc_dtype storage_dtype) {
  if (head_dim <= 0) fail(KVC_ERR_INVALID_ARGUMENT, "head_dim must be > 0, got %d", head_dim);
  if (!kvc_format_is_valid(storage_dtype))
    fail(KVC_ERR_INVALID_ARGUMENT, "unknown storage dtype %d", int(storage_dtype));
  if (kvc_format_group_size(storage_dtype) != 1)
    fail(KVC_ERR_UNSUPPORTED, "the cpu backend has no kernels for storage format %s",
         kvc_format_name(storage_dtype));
}

inline void check_storage(int32_t head_dim, const StorageFormats& formats) {
  check_storage(head_dim, formats.k);
  check_storage(head_dim, formats.v);
}

inline void check_jobs(const void* jobs, size_t n_jobs, const char* call) {
  if (n_jobs > 0 && jobs == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "%s jobs are NULL", call);
}

// The number of tokens in a job's segment list.
inline size_t count_tokens(const kvc_segment* segments, int32_t n_segments, const char* call,
                           size_t job) {
  if (n_segments < 0 || (n_segments > 0 && segments == nullptr))
    fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: bad segment list", call, job);
  size_t tokens = 0;
  for (int32_t s = 0; s < n_segments; ++s) {
    if (segments[s].count < 0)
      fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: segment %d has a negative count", call, job, s);
    tokens += size_t(segments[s].count);
  }
  return tokens;
}

}  // namespace kvc::cpu
