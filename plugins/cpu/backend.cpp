#include "backend.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "append_kernel.hpp"
#include "attention_kernel.hpp"
#include "compact_kernel.hpp"
#include "host_structs.hpp"
#include "kernels.hpp"
#include "plugin_error.hpp"
#include "read_keys_kernel.hpp"
#include "read_tokens_kernel.hpp"

namespace kvc::cpu {
namespace {

constexpr size_t kAlignment = 64;

struct Instance {
  const kvc_host_api* host;
};

const kvc_host_api& host_of(void* instance) {
  if (instance == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "backend instance is NULL");
  return *static_cast<Instance*>(instance)->host;
}

void check_host(const kvc_host_api* host) {
  if (host == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "host API is NULL");
  const unsigned major = host->abi_version >> 16;
  if (major != KVC_PLUGIN_ABI_MAJOR)
    fail(KVC_ERR_PLUGIN, "host plugin ABI major %u, built for %d", major, KVC_PLUGIN_ABI_MAJOR);
  if (host->struct_size < offsetof(kvc_host_api, parallel_for) + sizeof host->parallel_for ||
      host->parallel_for == nullptr)
    fail(KVC_ERR_PLUGIN, "host API lacks parallel_for");
}

int32_t create(const kvc_host_api* host, void** out_instance, kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    if (out_instance == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "out_instance is NULL");
    check_host(host);
    // Fails where KVC_CPU_KERNELS names a set this CPU cannot run: no instance, no attention.
    const TileKernels& kernels = tile_kernels();
    *out_instance = new Instance{host};
    if (host->log) {
      char message[64];
      std::snprintf(message, sizeof message, "cpu backend: %s kernels", kernels.name);
      host->log(host->host, KVC_LOG_DEBUG, message);
    }
  });
}

void destroy(void* instance) noexcept { delete static_cast<Instance*>(instance); }

void* alloc(void*, size_t bytes) noexcept {
  if (bytes > SIZE_MAX - kAlignment) return nullptr;
  // aligned_alloc wants a size that is a multiple of the alignment; 0 still gets a block.
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded);
}

void free_memory(void*, void* ptr) noexcept { std::free(ptr); }

int32_t copy(void*, void* dst, const void* src, size_t bytes, kvc_copy_kind kind,
             kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    if (kind != KVC_COPY_HOST_TO_DEVICE && kind != KVC_COPY_DEVICE_TO_HOST &&
        kind != KVC_COPY_DEVICE_TO_DEVICE)
      fail(KVC_ERR_INVALID_ARGUMENT, "unknown copy kind %d", int(kind));
    if (bytes == 0) return;
    if (dst == nullptr || src == nullptr)
      fail(KVC_ERR_INVALID_ARGUMENT, "copy with a NULL pointer");
    std::memcpy(dst, src, bytes);
  });
}

int32_t append(void* instance, const kvc_append_call* given, kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_storage_call(given, sizeof(kvc_append_call), "append call");
    const HostJobs<kvc_append_job> jobs(call.jobs, call.n_jobs, sizeof(kvc_append_job), "append");
    run_append(host_of(instance), jobs.data(), call.n_jobs, call.head_dim,
               {call.storage_dtype, call.v_dtype});
  });
}

int32_t attend(void* instance, const kvc_attend_call* given, kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_storage_call(given, sizeof(kvc_attend_call), "attend call");
    const HostJobs<kvc_attend_job> jobs(call.jobs, call.n_jobs, sizeof(kvc_attend_job), "attend");
    run_attend(host_of(instance), jobs.data(), call);
  });
}

int32_t compact(void* instance, const kvc_compact_call* given, kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_storage_call(given, sizeof(kvc_compact_call), "compact call");
    const HostJobs<kvc_compact_job> jobs(call.jobs, call.n_jobs, sizeof(kvc_compact_job),
                                         "compact");
    run_compact(host_of(instance), jobs.data(), call.n_jobs, call.head_dim,
                {call.storage_dtype, call.v_dtype});
  });
}

int32_t read_keys(void* instance, const kvc_read_keys_call* given,
                  kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_host_struct(given, sizeof(kvc_read_keys_call), "read_keys call");
    const HostJobs<kvc_read_keys_job> jobs(call.jobs, call.n_jobs, sizeof(kvc_read_keys_job),
                                           "read_keys");
    run_read_keys(host_of(instance), jobs.data(), call.n_jobs, call.head_dim,
                  call.storage_dtype);
  });
}

int32_t read_tokens(void* instance, const kvc_read_tokens_call* given,
                    kvc_plugin_error* error) noexcept {
  return report_errors(error, [&] {
    const auto call = read_host_struct(given, sizeof(kvc_read_tokens_call), "read_tokens call");
    const HostJobs<kvc_read_tokens_job> jobs(call.jobs, call.n_jobs,
                                             sizeof(kvc_read_tokens_job), "read_tokens");
    run_read_tokens(host_of(instance), jobs.data(), call.n_jobs);
  });
}

}  // namespace

const kvc_backend_vtable backend_vtable = {
    sizeof(kvc_backend_vtable), create, destroy, alloc, free_memory, copy, append, attend,
    compact, read_keys, read_tokens,
};

}  // namespace kvc::cpu
