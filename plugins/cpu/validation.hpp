// Checks shared by the kernels; each throws Error(KVC_ERR_INVALID_ARGUMENT).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_backend_plugin.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_plugin.h"
#include "plugin_error.hpp"
#include "storage_formats.hpp"

namespace kvc::cpu {


inline void check_storage(int32_t head_dim, kvc_dtype storage_dtype) {
  if (head_dim <= 0) fail(KVC_ERR_INVALID_ARGUMENT, "head_dim must be > 0, got %d", head_dim);
  if (!kvc_format_is_valid(storage_dtype))
    fail(KVC_ERR_INVALID_ARGUMENT, "unknown storage dtype %d", int(storage_dtype));
  if (size_t(head_dim) % kvc_format_group_size(storage_dtype) != 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "head_dim %d is not a multiple of %s's group of %u values",
         head_dim, kvc_format_name(storage_dtype), kvc_format_group_size(storage_dtype));
}

inline void check_storage(int32_t head_dim, const StorageFormats& formats) {
  check_storage(head_dim, formats.k);
  check_storage(head_dim, formats.v);
}

// Every segment of a job with formats of its own holds rows of valid formats for head_dim
// (the call's formats were checked by check_storage).
inline void check_segment_formats(const kvc_segment* segments, int32_t n_segments,
                                  int32_t head_dim, const char* call, size_t job) {
  for (int32_t s = 0; s < n_segments; ++s) {
    if (!segments[s].own_formats) continue;
    for (const kvc_dtype format : {segments[s].k_dtype, segments[s].v_dtype}) {
      if (!kvc_format_is_valid(format))
        fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: segment %d has unknown storage dtype %d", call,
             job, s, int(format));
      if (size_t(head_dim) % kvc_format_group_size(format) != 0)
        fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: segment %d's format %s does not divide "
             "head_dim %d into its groups of %u values", call, job, s, kvc_format_name(format),
             head_dim, kvc_format_group_size(format));
    }
  }
}

using plugin::Reads;

inline size_t count_tokens(const kvc_segment* segments, int32_t n_segments, const char* call,
                           size_t job, Reads reads = Reads::rows_and_positions) {
  return size_t(plugin::count_segment_tokens(segments, n_segments, call, job, reads));
}

}  // namespace kvc::cpu
