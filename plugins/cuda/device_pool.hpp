// The memory of one cache on the device: a few large cudaMalloc chunks carved into the blocks
// and segments the core asks for. Freed memory is kept, by size, for the next request of that
// size (paged caches ask for one block size again and again); chunks go back to the device
// only when the instance is destroyed, so alloc and free never synchronise the device.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace kvc::cuda {

class DevicePool {
 public:
  DevicePool() = default;
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  ~DevicePool();

  // At least `bytes` of device memory, 256-byte aligned; NULL when the device has no more.
  void* alloc(size_t bytes) noexcept;
  // Gives back memory from alloc; NULL is ignored.
  void release(void* ptr) noexcept;

 private:
  std::mutex mutex_;
  std::vector<void*> chunks_;
  char* next_ = nullptr;  // the unused rest of the newest chunk
  size_t left_ = 0;
  size_t chunk_bytes_ = size_t{16} << 20;  // of the next chunk
  std::unordered_map<size_t, std::vector<void*>> free_;  // by rounded size
  std::unordered_map<void*, size_t> sizes_;               // every block handed out
};

}  // namespace kvc::cuda
