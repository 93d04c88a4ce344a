// Causal grouped-query attention of new queries over stored segments (online softmax), and
// the per-key statistics that eviction policies ask for.
#pragma once

#include <cstddef>

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

// Runs every job on the host's arena; throws Error on an invalid config or job.
// Runs the call's jobs, given as a plain array (the call's own jobs pointer is not read).
// Queries are rotated by `k_rotation`, as the stored keys were.
void run_attend(const kvc_host_api& host, const kvc_attend_job* jobs, const kvc_attend_call& call,
                kvc_rotation k_rotation);

}  // namespace kvc::cpu
