// Causal grouped-query attention of new queries over stored segments (online softmax), and
// the per-key statistics that eviction policies ask for.
#pragma once

#include <cstddef>

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

// Runs every job on the host's arena; throws PluginError on an invalid config or job.
void run_attend(const kvc_host_api& host, const kvc_attend_job* jobs, size_t n_jobs,
                const kvc_attend_config& config);

}  // namespace kvc::cpu
