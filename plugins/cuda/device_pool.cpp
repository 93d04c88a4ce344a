#include "device_pool.hpp"

#include <cuda_runtime_api.h>

#include <new>

namespace kvc::cuda {

void* CudaChunks::get(size_t bytes) const noexcept {
  void* memory = nullptr;
  if (cudaMalloc(&memory, bytes) == cudaSuccess) return memory;
  cudaGetLastError();
  return nullptr;
}

void CudaChunks::put(void* chunk) const noexcept { cudaFree(chunk); }

void* DevicePool::alloc(size_t bytes) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    return heap_.alloc(bytes);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void DevicePool::release(void* ptr) noexcept {
  if (ptr == nullptr) return;
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    heap_.release(ptr);
  } catch (const std::bad_alloc&) {
    // A free range that could not be recorded stays unused until the instance is destroyed.
  }
}

}  // namespace kvc::cuda
