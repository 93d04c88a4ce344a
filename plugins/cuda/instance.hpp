// One CUDA backend instance (one cache): its device, the pool its blocks come from, pinned
// staging, resident segment tables, and what the launchers need to size their grids.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>

#include "device_pool.hpp"
#include "kvcache/kvcache_plugin.h"
#include "resident_memory.hpp"
#include "staging.hpp"

namespace kvc::cuda {

struct Instance {
  Instance(const kvc_host_api* host_api, int device_id, int sms, size_t table_budget)
      : host(host_api),
        device(device_id),
        multiprocessors(sms),
        scratch(device_id),
        tables(ResidentMemory{scratch.get()}, table_budget) {}

  const kvc_host_api* host;
  int device;
  int multiprocessors;
  DevicePool pool;
  ScratchPool scratch;
  PinnedPool pinned;
  std::mutex tables_mutex;
  DeviceTables tables;  // attend jobs' segment tables; freed before the scratch pool
};

// Makes the instance's device current for the scope and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(const Instance& instance);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

inline cudaStream_t stream_of(void* stream) { return static_cast<cudaStream_t>(stream); }

// The launchers, one per data call; each validates its jobs (given as plain arrays) first.
void run_append(Instance& instance, const kvc_append_job* jobs, const kvc_append_call& call);
void run_attend(Instance& instance, const kvc_attend_job* jobs, const kvc_attend_call& call);
void run_compact(Instance& instance, const kvc_compact_job* jobs, const kvc_compact_call& call);
void run_read_keys(Instance& instance, const kvc_read_keys_job* jobs,
                   const kvc_read_keys_call& call);
void run_read_tokens(Instance& instance, const kvc_read_tokens_job* jobs,
                     const kvc_read_tokens_call& call);

}  // namespace kvc::cuda
