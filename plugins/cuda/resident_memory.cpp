#include "resident_memory.hpp"

#include "device_types.hpp"
#include "kvcache/kvcache_format.h"

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

void ResidentMemory::wait(Stream stream, const Mark& mark) const noexcept {
  if (!mark.event()) return;
  if (cudaStreamWaitEvent(stream, mark.event(), 0) != cudaSuccess) {
    cudaGetLastError();
    cudaEventSynchronize(mark.event());
  }
}

void ResidentMemory::free(void* memory, Stream stream, const Mark* after) const noexcept {
  if (after) wait(stream, *after);
  if (cudaFreeAsync(memory, stream) != cudaSuccess) cudaGetLastError();
}

size_t resident_table_budget(const kvc_backend_config* config) {
  constexpr size_t kTableBytesPerBlock = sizeof(DevSegment) + sizeof(int64_t);
  constexpr size_t kLeast = size_t{64} << 20;
  if (!config) return DeviceTables::kDefaultBudget;
  const size_t token_bytes = kvc_format_row_bytes(config->k_dtype, size_t(config->head_dim)) +
                             kvc_format_row_bytes(config->v_dtype, size_t(config->head_dim)) +
                             sizeof(int32_t);
  const size_t block_bytes = token_bytes * size_t(config->block_tokens > 0 ? config->block_tokens : 1);
  const size_t blocks = config->memory_limit / block_bytes + 1;
  const size_t budget = blocks > SIZE_MAX / (4 * kTableBytesPerBlock) ? SIZE_MAX
                                                                        : 4 * kTableBytesPerBlock * blocks;
  return budget > kLeast ? budget : kLeast;
}

}  // namespace kvc::cuda
