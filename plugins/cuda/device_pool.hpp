// The memory of one cache on the device: cudaMalloc chunks (16 MiB, doubling to 1 GiB; a
// larger request gets a chunk of its own) carved into the blocks and segments the core asks
// for by RangeHeap (range_heap.hpp), which reuses freed memory for requests of any size.
// Chunks go back to the device when the instance is destroyed, or when the device is out of
// memory and they are wholly free: alloc and free synchronise the device only then.
#pragma once

#include <cstddef>
#include <mutex>

#include "range_heap.hpp"

namespace kvc::cuda {

struct CudaChunks {
  void* get(size_t bytes) const noexcept;
  void put(void* chunk) const noexcept;
};

class DevicePool {
 public:
  DevicePool() = default;
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // At least `bytes` of device memory, 256-byte aligned; NULL when the device has no more.
  void* alloc(size_t bytes) noexcept;
  // Gives back memory from alloc; NULL is ignored.
  void release(void* ptr) noexcept;

 private:
  std::mutex mutex_;
  RangeHeap<CudaChunks> heap_{CudaChunks{}};
};

}  // namespace kvc::cuda
