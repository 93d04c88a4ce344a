// Scatter of new tokens' K/V rows (and positions) into storage runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_plugin.h"
#include "validation.hpp"

namespace kvc::cpu {

// Runs every job on the host's arena; throws Error on an invalid job or dtype.
void run_append(const kvc_host_api& host, const kvc_append_job* jobs, size_t n_jobs,
                int32_t head_dim, const StorageFormats& formats);

// Copies the call's tensors into its slots (checked by the plugin skeleton) on the host's
// arena: large appends token by token in the tensors' order, smaller ones slot by slot. K rows
// are rotated by `k_rotation` first unless the call's k_rotated says they are stored rows.
void run_append_tensors(const kvc_host_api& host, const kvc_append_slot* slots,
                        const kvc_append_tensors_call& call, kvc_rotation k_rotation);

}  // namespace kvc::cpu
