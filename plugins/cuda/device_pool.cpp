#include "device_pool.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <new>

namespace kvc::cuda {
namespace {

constexpr size_t kAlignment = 256;
constexpr size_t kLargestChunk = size_t{1} << 30;

}  // namespace

DevicePool::~DevicePool() {
  for (void* chunk : chunks_) cudaFree(chunk);
}

void* DevicePool::alloc(size_t bytes) noexcept {
  if (bytes > SIZE_MAX - kAlignment) return nullptr;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    auto reuse = free_.find(rounded);
    if (reuse != free_.end() && !reuse->second.empty()) {
      void* ptr = reuse->second.back();
      reuse->second.pop_back();
      sizes_.emplace(ptr, rounded);
      return ptr;
    }
    if (left_ < rounded) {
      const size_t chunk = std::max(rounded, chunk_bytes_);
      void* memory = nullptr;
      if (cudaMalloc(&memory, chunk) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
      chunks_.push_back(memory);
      next_ = static_cast<char*>(memory);
      left_ = chunk;
      chunk_bytes_ = std::min(kLargestChunk, chunk_bytes_ * 2);
    }
    void* ptr = next_;
    sizes_.emplace(ptr, rounded);
    next_ += rounded;
    left_ -= rounded;
    return ptr;
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void DevicePool::release(void* ptr) noexcept {
  if (ptr == nullptr) return;
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = sizes_.find(ptr);
    if (found == sizes_.end()) return;
    free_[found->second].push_back(ptr);
    sizes_.erase(found);
  } catch (const std::bad_alloc&) {
    // The block stays unused until the pool is destroyed.
  }
}

}  // namespace kvc::cuda
