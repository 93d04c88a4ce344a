// read_tokens: positions and statistics of stored tokens into host memory.
#pragma once

#include <cstddef>

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

void run_read_tokens(const kvc_host_api& host, const kvc_read_tokens_job* jobs, size_t n_jobs);

}  // namespace kvc::cpu
