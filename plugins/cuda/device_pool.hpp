// The memory of one cache on the device: cudaMalloc chunks (16 MiB, doubling to 1 GiB; a
// larger request gets a chunk of its own) carved into the blocks and segments the core asks
// for by RangeHeap (range_heap.hpp), which reuses freed memory for requests of any size.
// Chunks go back to the device when the instance is destroyed, or when the device is out of
// memory and they are wholly free: alloc and free synchronise the device only then.
// A stream-ordered release (ABI 1.3 free_async) parks the range behind an event recorded on
// the stream; alloc takes such ranges back once their event has completed, and waits for the
// events only when the device is otherwise out of memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "range_heap.hpp"

namespace kvc::cuda {

struct CudaChunks {
  void* get(size_t bytes) const noexcept;
  void put(void* chunk) const noexcept;
};

class DevicePool {
 public:
  DevicePool() = default;
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // At least `bytes` of device memory, 256-byte aligned; NULL when the device has no more.
  void* alloc(size_t bytes) noexcept;
  // Gives back memory from alloc; NULL is ignored.
  void release(void* ptr) noexcept;
  // Gives back memory from alloc once the work queued on `stream` so far has finished;
  // false (nothing done) when the event for it cannot be had.
  bool release_after(void* ptr, cudaStream_t stream) noexcept;

 private:
  // Under the lock: releases the parked ranges whose event has completed (all of them, waiting
  // for each, when `wait`).
  void reclaim_locked(bool wait);

  std::mutex mutex_;
  std::vector<std::pair<void*, cudaEvent_t>> parked_;
  RangeHeap<CudaChunks> heap_{CudaChunks{}};
};

}  // namespace kvc::cuda
