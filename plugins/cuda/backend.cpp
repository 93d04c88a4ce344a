#include "backend.hpp"

#include <cstddef>
#include <cstdio>

#include "cuda_check.hpp"
#include "host_structs.hpp"
#include "instance.hpp"
#include "plugin_error.hpp"

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

Instance& instance_of(void* instance) {
  if (instance == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "backend instance is NULL");
  return *static_cast<Instance*>(instance);
}

void check_host(const kvc_host_api* host) {
  if (host == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "host API is NULL");
  const unsigned major = host->abi_version >> 16;
  if (major != KVC_PLUGIN_ABI_MAJOR)
    fail(KVC_ERR_PLUGIN, "host plugin ABI major %u, built for %d", major, KVC_PLUGIN_ABI_MAJOR);
}

// The current device, or NO_DEVICE saying why there is none.
int find_device() {
  int count = 0;
  const cudaError_t found = cudaGetDeviceCount(&count);
  if (found != cudaSuccess) {
    cudaGetLastError();
    fail(KVC_ERR_NO_DEVICE, "no usable CUDA device: %s (%s)", cudaGetErrorString(found),
         cudaGetErrorName(found));
  }
  if (count == 0) fail(KVC_ERR_NO_DEVICE, "no CUDA device is present");
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
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

int32_t create(const kvc_host_api* host, void** out_instance, kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    if (out_instance == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "out_instance is NULL");
    check_host(host);
    const int device = find_device();
    int multiprocessors = 0;
    check_cuda(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute");
    *out_instance = new Instance(host, device, multiprocessors);
    if (host->log) {
      cudaDeviceProp prop{};
      char message[320];
      if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
        std::snprintf(message, sizeof message, "cuda backend: device %d (%s, %d multiprocessors)",
                      device, prop.name, multiprocessors);
        host->log(host->host, KVC_LOG_DEBUG, message);
      }
    }
  });
}

void destroy(void* instance) noexcept {
  if (instance == nullptr) return;
  auto* self = static_cast<Instance*>(instance);
  try {
    const DeviceScope scope(*self);
    delete self;
  } catch (const PluginError&) {
    delete self;
  }
}

void* alloc(void* instance, size_t bytes) noexcept {
  if (instance == nullptr) return nullptr;
  auto* self = static_cast<Instance*>(instance);
  try {
    const DeviceScope scope(*self);
    return self->pool.alloc(bytes);
  } catch (const PluginError&) {
    return nullptr;
  }
}

void free_memory(void* instance, void* ptr) noexcept {
  if (instance != nullptr) static_cast<Instance*>(instance)->pool.release(ptr);
}

cudaMemcpyKind memcpy_kind(kvc_copy_kind kind) {
  switch (kind) {
    case KVC_COPY_HOST_TO_DEVICE: return cudaMemcpyHostToDevice;
    case KVC_COPY_DEVICE_TO_HOST: return cudaMemcpyDeviceToHost;
    case KVC_COPY_DEVICE_TO_DEVICE: return cudaMemcpyDeviceToDevice;
  }
  fail(KVC_ERR_INVALID_ARGUMENT, "unknown copy kind %d", int(kind));
}

// The copy entry carries no stream, so it waits for all the device's work first (an append
// may still be writing the source on the engine's non-blocking stream), and returns when the
// copy is done, as the ABI asks. The core copies only to grow, unshare or read back, rarely.
int32_t copy(void* instance, void* dst, const void* src, size_t bytes, kvc_copy_kind kind,
             kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const cudaMemcpyKind direction = memcpy_kind(kind);
    if (bytes == 0) return;
    if (dst == nullptr || src == nullptr)
      fail(KVC_ERR_INVALID_ARGUMENT, "copy with a NULL pointer");
    const DeviceScope scope(instance_of(instance));
    check_cuda(cudaDeviceSynchronize(), "copy");
    check_cuda(cudaMemcpyAsync(dst, src, bytes, direction, nullptr), "copy");
    check_cuda(cudaStreamSynchronize(nullptr), "copy");
  });
}

int32_t append(void* instance, const kvc_append_call* given, kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_storage_call(given, sizeof(kvc_append_call), "append call");
    const HostJobs<kvc_append_job> jobs(call.jobs, call.n_jobs, sizeof(kvc_append_job), "append");
    Instance& self = instance_of(instance);
    const DeviceScope scope(self);
    run_append(self, jobs.data(), call);
  });
}

int32_t attend(void* instance, const kvc_attend_call* given, kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_storage_call(given, sizeof(kvc_attend_call), "attend call");
    const HostJobs<kvc_attend_job> jobs(call.jobs, call.n_jobs, sizeof(kvc_attend_job), "attend");
    Instance& self = instance_of(instance);
    const DeviceScope scope(self);
    run_attend(self, jobs.data(), call);
  });
}

int32_t compact(void* instance, const kvc_compact_call* given, kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_storage_call(given, sizeof(kvc_compact_call), "compact call");
    const HostJobs<kvc_compact_job> jobs(call.jobs, call.n_jobs, sizeof(kvc_compact_job),
                                         "compact");
    Instance& self = instance_of(instance);
    const DeviceScope scope(self);
    run_compact(self, jobs.data(), call);
  });
}

int32_t read_keys(void* instance, const kvc_read_keys_call* given,
                  kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_host_struct(given, sizeof(kvc_read_keys_call), "read_keys call");
    const HostJobs<kvc_read_keys_job> jobs(call.jobs, call.n_jobs, sizeof(kvc_read_keys_job),
                                           "read_keys");
    Instance& self = instance_of(instance);
    const DeviceScope scope(self);
    run_read_keys(self, jobs.data(), call);
  });
}

int32_t read_tokens(void* instance, const kvc_read_tokens_call* given,
                    kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_host_struct(given, sizeof(kvc_read_tokens_call), "read_tokens call");
    const HostJobs<kvc_read_tokens_job> jobs(call.jobs, call.n_jobs,
                                             sizeof(kvc_read_tokens_job), "read_tokens");
    Instance& self = instance_of(instance);
    const DeviceScope scope(self);
    run_read_tokens(self, jobs.data(), call);
  });
}

}  // namespace

const kvc_backend_vtable backend_vtable = {
    sizeof(kvc_backend_vtable), create, destroy, alloc, free_memory, copy, append, attend,
    compact, read_keys, read_tokens,
};

}  // namespace kvc::cuda
