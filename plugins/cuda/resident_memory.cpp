#include "resident_memory.hpp"

namespace kvc::cuda {

ResidentMemory::Mark::~Mark() {
  if (event_) cudaEventDestroy(event_);
}

void* ResidentMemory::alloc(size_t bytes, Stream stream) const {
  void* memory = nullptr;
  if (cudaMallocFromPoolAsync(&memory, bytes, pool, stream) != cudaSuccess) {
    cudaGetLastError();  // a full device is not an error of the call: it goes without
    return nullptr;
  }
  return memory;
}

ResidentMemory::Mark ResidentMemory::mark(Stream stream) const noexcept {
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess) {
    if (cudaEventRecord(event, stream) == cudaSuccess) return Mark(event);
    cudaEventDestroy(event);
  }
  cudaGetLastError();
  cudaStreamSynchronize(stream);
  return Mark();
}

void ResidentMemory::free(void* memory, Stream stream, const Mark* after) const noexcept {
  if (after && after->event()) cudaStreamWaitEvent(stream, after->event(), 0);
  if (cudaFreeAsync(memory, stream) != cudaSuccess) cudaGetLastError();
}

}  // namespace kvc::cuda
