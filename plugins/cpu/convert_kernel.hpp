// Stored rows re-encoded into other formats (ABI 1.6 convert): a head's tokens demoted to a
// smaller format, or copied as they are.
#pragma once

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

// Runs every job on the host's arena; throws Error on an invalid job.
void run_convert(const kvc_host_api& host, const kvc_convert_job* jobs,
                 const kvc_convert_call& call);

}  // namespace kvc::cpu
