// Compaction of stored tokens after eviction: kept tokens move to the front, in order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_plugin.h"
#include "validation.hpp"

namespace kvc::cpu {

// Runs every job on the host's arena; throws Error on an invalid job.
void run_compact(const kvc_host_api& host, const kvc_compact_job* jobs, size_t n_jobs,
                 int32_t head_dim, const StorageFormats& formats);

}  // namespace kvc::cpu
