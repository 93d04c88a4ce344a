#include "staging.hpp"

#include "cuda_check.hpp"

namespace kvc::cuda {

void* CudaPinnedHost::alloc(size_t bytes) {
  void* data = nullptr;
  check_cuda(cudaMallocHost(&data, bytes), "pinned host memory");
  return data;
}

CudaPinnedHost::Event CudaPinnedHost::make_event() {
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "creating an event");
  return event;
}

void CudaPinnedHost::record(Event event, Stream stream) {
  check_cuda(cudaEventRecord(event, stream), "recording an event");
}

bool CudaPinnedHost::done(Event event) {
  const cudaError_t state = cudaEventQuery(event);
  if (state == cudaErrorNotReady) return false;
  check_cuda(state, "waiting for a pinned buffer");
  return true;
}

ScratchPool::ScratchPool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  check_cuda(cudaMemPoolCreate(&pool_, &props), "creating the scratch memory pool");
  uint64_t keep = UINT64_MAX;
  const cudaError_t set = cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep);
  if (set != cudaSuccess) {
    cudaMemPoolDestroy(pool_);
    check_cuda(set, "setting the scratch pool's release threshold");
  }
}

ScratchPool::~ScratchPool() { cudaMemPoolDestroy(pool_); }

DeviceScratch::DeviceScratch(const ScratchPool& pool, size_t bytes, cudaStream_t stream)
    : stream_(stream) {
  if (bytes == 0) return;
  void* memory = nullptr;
  check_cuda(cudaMallocFromPoolAsync(&memory, bytes, pool.get(), stream), "device scratch memory");
  data_ = static_cast<char*>(memory);
}

DeviceScratch::~DeviceScratch() {
  if (data_) cudaFreeAsync(data_, stream_);
}

size_t Upload::add(const void* data, size_t n_bytes) {
  const size_t offset = (bytes_.size() + kAlign - 1) / kAlign * kAlign;
  bytes_.resize(offset + n_bytes);
  if (data != nullptr && n_bytes > 0) std::memcpy(bytes_.data() + offset, data, n_bytes);
  return offset;
}

void Upload::send(PinnedPool& pinned, const DeviceScratch& memory) {
  if (bytes_.empty()) return;
  const PinnedPool::Buffer buffer = pinned.acquire(bytes_.size());
  auto* host = static_cast<unsigned char*>(buffer.data);
  std::memcpy(host, bytes_.data(), bytes_.size());
  for (const Link& link : links_) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(memory.data() + link.target);
    std::memcpy(host + link.field, &address, sizeof address);
  }
  const cudaError_t copied = cudaMemcpyAsync(memory.data(), host, bytes_.size(),
                                             cudaMemcpyHostToDevice, memory.stream());
  pinned.release(buffer, memory.stream());
  check_cuda(copied, "copying a call's data to the device");
}

}  // namespace kvc::cuda
