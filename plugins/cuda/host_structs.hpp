// The host's structs as the CUDA backend reads them: the in-tree backends' shared rules
// (plugins/support).
#pragma once

#include "kvcache_support/host_structs.hpp"
#include "plugin_error.hpp"

namespace kvc::cuda {

using plugin::HostJobs;
using plugin::read_host_struct;
using plugin::read_storage_call;

}  // namespace kvc::cuda
