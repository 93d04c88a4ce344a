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

DevicePool::~DevicePool() {
  try {
    reclaim_locked(true);
  } catch (const std::bad_alloc&) {
    // The heap's chunks go back to the device below whatever their bookkeeping says.
  }
}

void DevicePool::reclaim_locked(bool wait) {
  auto kept = parked_.begin();
  for (auto& [ptr, event] : parked_) {
    const cudaError_t state = wait ? cudaEventSynchronize(event) : cudaEventQuery(event);
    if (state == cudaErrorNotReady) {
      *kept++ = {ptr, event};
      continue;
    }
    if (state != cudaSuccess) cudaGetLastError();  // a failed device: the range is free anyway
    cudaEventDestroy(event);
    heap_.release(ptr);
  }
  parked_.erase(kept, parked_.end());
}

void* DevicePool::alloc(size_t bytes) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!parked_.empty()) reclaim_locked(false);
    if (void* memory = heap_.alloc(bytes)) return memory;
    if (parked_.empty()) return nullptr;
    reclaim_locked(true);
    return heap_.alloc(bytes);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

bool DevicePool::release_after(void* ptr, cudaStream_t stream) noexcept {
  if (ptr == nullptr) return true;
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (cudaEventRecord(event, stream) != cudaSuccess) {
    cudaGetLastError();
    cudaEventDestroy(event);
    return false;
  }
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    parked_.emplace_back(ptr, event);
    return true;
  } catch (const std::bad_alloc&) {
    cudaEventDestroy(event);
    return false;
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
