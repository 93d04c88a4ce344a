// Moving a call's small host data (job tables, positions, host-resident Q, K or V) to the
// device and results back, without synchronising the device on the way in: bytes are packed
// on the host, copied through pinned memory that is reused once the copy out of it has run,
// into device memory from the stream-ordered allocator, freed in stream order after the call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda_check.hpp"
#include "pinned_slots.hpp"

namespace kvc::cuda {

// The pinned host memory and events of PinnedSlots.
struct CudaPinnedHost {
  using Event = cudaEvent_t;
  using Stream = cudaStream_t;
  void* alloc(size_t bytes);
  void free(void* data) { cudaFreeHost(data); }
  Event make_event();
  void destroy(Event event) { cudaEventDestroy(event); }
  void record(Event event, Stream stream);
  bool done(Event event);
  void wait(Event event) { cudaEventSynchronize(event); }
};

// Pinned host buffers, each reusable once the copy last enqueued from or into it has run
// (pinned_slots.hpp); thread-safe.
class PinnedPool {
 public:
  using Buffer = PinnedSlots<CudaPinnedHost>::Buffer;
  PinnedPool() : slots_(CudaPinnedHost{}) {}
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A buffer of at least `bytes`; throws Error when the host has no pinned memory left.
  Buffer acquire(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    return slots_.acquire(bytes);
  }
  // Marks the buffer free once the work enqueued on `stream` so far has run.
  void release(const Buffer& buffer, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_.release(buffer, stream);
  }

 private:
  std::mutex mutex_;
  PinnedSlots<CudaPinnedHost> slots_;
};

// The instance's stream-ordered memory pool for call scratch: it keeps what calls gave back
// (the default pool would return it to the device at every synchronisation).
class ScratchPool {
 public:
  explicit ScratchPool(int device);
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;
  ~ScratchPool();
  cudaMemPool_t get() const { return pool_; }

 private:
  cudaMemPool_t pool_ = nullptr;
};

// Device memory for one call from the scratch pool, freed (in stream order) when the call's
// scope ends.
class DeviceScratch {
 public:
  DeviceScratch(const ScratchPool& pool, size_t bytes, cudaStream_t stream);
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch();
  char* data() const { return data_; }
  cudaStream_t stream() const { return stream_; }

 private:
  char* data_ = nullptr;
  cudaStream_t stream_;
};

// Offsets of several arrays in one scratch allocation, each 256-byte aligned.
struct ScratchLayout {
  size_t bytes = 0;
  size_t take(size_t n) {
    const size_t at = (bytes + 255) / 256 * 256;
    bytes = at + n;
    return at;
  }
};

// The bytes a call uploads: arrays at 16-byte aligned offsets, and pointer fields that are
// set to device addresses inside the upload once its device memory is known.
class Upload {
 public:
  static constexpr size_t kAlign = 16;
  // Appends n elements (zeroed when data is NULL); returns their offset.
  size_t add(const void* data, size_t n_bytes);
  template <class T>
  size_t add_array(const T* data, size_t n) {
    return add(data, n * sizeof(T));
  }
  template <class T>
  T* at(size_t offset) {
    return reinterpret_cast<T*>(bytes_.data() + offset);
  }
  // The pointer stored at byte `field` of the upload is to point at byte `target` of it
  // (field: a struct's offset plus offsetof the pointer member).
  void link(size_t field, size_t target) { links_.push_back({field, target}); }
  size_t size() const { return bytes_.size(); }

  // Copies the upload into `memory` (of at least size() bytes) on its stream, with the links
  // set; the copy may still run when this returns.
  void send(PinnedPool& pinned, const DeviceScratch& memory);

 private:
  struct Link {
    size_t field;
    size_t target;
  };
  std::vector<unsigned char> bytes_;
  std::vector<Link> links_;
};

// Copies `bytes` of device memory at `src` into pinned host memory on `stream`, waits for it,
// and hands the host copy to use(const char*), which puts the results where they belong.
template <class Use>
void download(PinnedPool& pinned, const void* src, size_t bytes, cudaStream_t stream, Use&& use) {
  if (bytes == 0) return;
  const PinnedPool::Buffer buffer = pinned.acquire(bytes);
  cudaError_t state = cudaMemcpyAsync(buffer.data, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (state == cudaSuccess) state = cudaStreamSynchronize(stream);
  if (state == cudaSuccess) use(static_cast<const char*>(buffer.data));
  pinned.release(buffer, stream);
  check_cuda(state, "copying results to the host");
}

}  // namespace kvc::cuda
