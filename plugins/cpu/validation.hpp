// Checks shared by the kernels; each throws PluginError(KVC_ERR_INVALID_ARGUMENT).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtype.hpp"
#include "kvcache/kvcache_backend_plugin.hpp"
#include "kvcache/kvcache_plugin.h"
#include "plugin_error.hpp"

namespace kvc::cpu {

inline void check_storage(int32_t head_dim, kvc_dtype storage_dtype) {
  if (head_dim <= 0) fail(KVC_ERR_INVALID_ARGUMENT, "head_dim must be > 0, got %d", head_dim);
  if (dtype_size(storage_dtype) == 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "unknown storage dtype %d", int(storage_dtype));
}

using plugin::Reads;

inline size_t count_tokens(const kvc_segment* segments, int32_t n_segments, const char* call,
                           size_t job, Reads reads = Reads::rows_and_positions) {
  return size_t(plugin::count_segment_tokens(segments, n_segments, call, job, reads));
}

}  // namespace kvc::cpu
