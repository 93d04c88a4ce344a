// Stored keys as f32 rows in host memory, for policies that score keys themselves.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

// Runs every job on the host's arena; throws Error on an invalid job.
void run_read_keys(const kvc_host_api& host, const kvc_read_keys_job* jobs, size_t n_jobs,
                   int32_t head_dim, kvc_dtype storage_dtype);

}  // namespace kvc::cpu
