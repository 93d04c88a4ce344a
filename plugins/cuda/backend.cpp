// The "cuda" backend on the backend skeleton (kvcache/kvcache_backend_plugin.hpp), which also
// defines the library's one exported symbol. Loading it touches no CUDA API, so the library
// loads on machines without a GPU or driver; the device is looked for when a cache creates an
// instance (NO_DEVICE there).
#include <cstddef>
#include <cstdio>
#include <memory>

#include "cuda_check.hpp"
#include "instance.hpp"
#include "kvcache/kvcache_backend_plugin.hpp"
#include "plugin_error.hpp"
#include "validation.hpp"

namespace kvc::cuda {

// The compute capability the library carries kernels for (sm_90 and PTX for later devices).
constexpr int kMinComputeMajor = 9;

DeviceScope::DeviceScope(const Instance& instance) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != instance.device) check_cuda(cudaSetDevice(instance.device), "cudaSetDevice");
}

DeviceScope::~DeviceScope() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

namespace {

// Device `requested` (-1: the current one), or NO_DEVICE saying why there is none.
int find_device(int requested) {
  int count = 0;
  const cudaError_t found = cudaGetDeviceCount(&count);
  if (found != cudaSuccess) {
    cudaGetLastError();
    fail(KVC_ERR_NO_DEVICE, "no usable CUDA device: %s (%s)", cudaGetErrorString(found),
         cudaGetErrorName(found));
  }
  if (count == 0) fail(KVC_ERR_NO_DEVICE, "no CUDA device is present");
  if (requested >= count)
    fail(KVC_ERR_NO_DEVICE, "backend.device %d: this machine has %d CUDA device(s)", requested,
         count);
  int device = requested;
  if (device < 0) check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
             "cudaDeviceGetAttribute");
  if (major < kMinComputeMajor)
    fail(KVC_ERR_UNSUPPORTED,
         "device %d has compute capability %d.%d; this build has kernels for %d.0 and later",
         device, major, minor, kMinComputeMajor);
  return device;
}

// What the kernels serve: K and V in one of f32, f16 and bf16, head_dim within the generic
// kernel's rows; no parameters.
void check_config(const kvc_backend_config& config) {
  check_storage(config.head_dim, config.k_dtype, config.v_dtype);
  plugin::refuse_params(config);
}

cudaMemcpyKind memcpy_kind(kvc_copy_kind kind) {
  switch (kind) {
    case KVC_COPY_HOST_TO_DEVICE: return cudaMemcpyHostToDevice;
    case KVC_COPY_DEVICE_TO_HOST: return cudaMemcpyDeviceToHost;
    case KVC_COPY_DEVICE_TO_DEVICE: return cudaMemcpyDeviceToDevice;
  }
  fail(KVC_ERR_INVALID_ARGUMENT, "unknown copy kind %d", int(kind));
}

class CudaBackend {
 public:
  static constexpr const char* kName = "cuda";
  static constexpr const char* kLabel = "cuda backend";

  static CudaBackend* create(const kvc_host_api& host, const kvc_backend_config* config) {
    if (config) check_config(*config);
    const int device = find_device(config ? config->device : -1);
    int multiprocessors = 0;
    check_cuda(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute");
    auto* backend = new CudaBackend(&host, device, multiprocessors, resident_table_budget(config));
    if (host.log) {
      cudaDeviceProp prop{};
      char message[320];
      if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
        std::snprintf(message, sizeof message, "cuda backend: device %d (%s, %d multiprocessors)",
                      device, prop.name, multiprocessors);
        host.log(host.host, KVC_LOG_DEBUG, message);
      }
    }
    return backend;
  }

  // The instance's pools give their memory back to the device, which must be current.
  ~CudaBackend() {
    try {
      const DeviceScope scope(self_);
      owned_.reset();
    } catch (const Error&) {
      owned_.reset();
    }
  }

  void* alloc(size_t bytes) noexcept {
    try {
      const DeviceScope scope(self_);
      return self_.pool.alloc(bytes);
    } catch (const Error&) {
      return nullptr;
    }
  }

  void free(void* ptr) noexcept { self_.pool.release(ptr); }

  // A range freed on a stream is reused once the stream's work so far is done; freed with no
  // stream (or when no event can be had), once all the device's work is.
  void free_async(void* ptr, void* stream) noexcept {
    try {
      const DeviceScope scope(self_);
      if (stream != nullptr && self_.pool.release_after(ptr, stream_of(stream))) return;
      if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
    } catch (const Error&) {
      // The device cannot be made current: nothing of it is running to wait for.
    }
    self_.pool.release(ptr);
  }

  // On the engine's stream, ordered after its work and nothing else. With no stream (the 1.0
  // copy, which has none) it waits for all the device's work first (an append may still be
  // writing the source on the engine's non-blocking stream) and returns when done.
  void copy(void* dst, const void* src, size_t bytes, kvc_copy_kind kind, void* stream) {
    const cudaMemcpyKind direction = memcpy_kind(kind);
    const DeviceScope scope(self_);
    if (stream != nullptr) {
      check_cuda(cudaMemcpyAsync(dst, src, bytes, direction, stream_of(stream)), "copy_async");
      return;
    }
    check_cuda(cudaDeviceSynchronize(), "copy");
    check_cuda(cudaMemcpyAsync(dst, src, bytes, direction, nullptr), "copy");
    check_cuda(cudaStreamSynchronize(nullptr), "copy");
  }

  void synchronize(void* stream) {
    const DeviceScope scope(self_);
    if (stream == nullptr) {
      check_cuda(cudaDeviceSynchronize(), "synchronize");
    } else {
      check_cuda(cudaStreamSynchronize(stream_of(stream)), "synchronize");
    }
  }

  void append(const kvc_append_job* jobs, const kvc_append_call& call) {
    const DeviceScope scope(self_);
    run_append(self_, jobs, call);
  }
  void attend(const kvc_attend_job* jobs, const kvc_attend_call& call) {
    const DeviceScope scope(self_);
    run_attend(self_, jobs, call);
  }
  void compact(const kvc_compact_job* jobs, const kvc_compact_call& call) {
    const DeviceScope scope(self_);
    run_compact(self_, jobs, call);
  }
  void read_keys(const kvc_read_keys_job* jobs, const kvc_read_keys_call& call) {
    const DeviceScope scope(self_);
    run_read_keys(self_, jobs, call);
  }
  void read_tokens(const kvc_read_tokens_job* jobs, const kvc_read_tokens_call& call) {
    const DeviceScope scope(self_);
    run_read_tokens(self_, jobs, call);
  }

 private:
  CudaBackend(const kvc_host_api* host, int device, int multiprocessors, size_t table_budget)
      : owned_(std::make_unique<Instance>(host, device, multiprocessors, table_budget)) {}

  std::unique_ptr<Instance> owned_;
  Instance& self_ = *owned_;
};

}  // namespace
}  // namespace kvc::cuda

KVC_BACKEND_PLUGIN(kvc::cuda::CudaBackend, KVC_VERSION_NUMBER);
