// The "cpu" backend: host memory, memcpy copies, and the append/attention kernels, on the
// backend skeleton (kvcache/kvcache_backend_plugin.hpp), which also defines the library's one
// exported symbol.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "append_kernel.hpp"
#include "attention_kernel.hpp"
#include "compact_kernel.hpp"
#include "convert_kernel.hpp"
#include "kernels.hpp"
#include "kvcache/kvcache_backend_plugin.hpp"
#include "kvcache/kvcache_format.h"
#include "plugin_error.hpp"
#include "read_keys_kernel.hpp"
#include "read_tokens_kernel.hpp"

namespace kvc::cpu {
namespace {

constexpr size_t kAlignment = 64;

// The kernels run every format of the table for K and V, each in its own, in host memory, and
// take no parameters.
void check_config(const kvc_backend_config& config) {
  for (const kvc_dtype format : {config.k_dtype, config.v_dtype}) {
    if (!kvc_format_is_valid(format))
      fail(KVC_ERR_UNSUPPORTED, "the cpu backend has no kernels for storage format %d",
           int(format));
  }
  if (config.device > 0)
    fail(KVC_ERR_UNSUPPORTED, "backend.device %d: host memory is the only device", config.device);
  plugin::refuse_params(config);
}

class CpuBackend {
 public:
  static constexpr const char* kName = "cpu";
  static constexpr const char* kLabel = "cpu backend";
  static constexpr bool kRotatesK = true;

  static CpuBackend* create(const kvc_host_api& host, const kvc_backend_config* config) {
    if (config) check_config(*config);
    if (host.struct_size < offsetof(kvc_host_api, parallel_for) + sizeof host.parallel_for ||
        host.parallel_for == nullptr)
      fail(KVC_ERR_PLUGIN, "host API lacks parallel_for");
    // Fails where KVC_CPU_KERNELS names a set this CPU cannot run: no instance, no attention.
    const TileKernels& kernels = tile_kernels();
    auto* backend = new CpuBackend(host, config ? config->k_rotation : KVC_ROTATION_NONE);
    if (host.log) {
      char message[64];
      std::snprintf(message, sizeof message, "cpu backend: %s kernels", kernels.name);
      host.log(host.host, KVC_LOG_DEBUG, message);
    }
    return backend;
  }

  void* alloc(size_t bytes) noexcept {
    if (bytes > SIZE_MAX - kAlignment) return nullptr;
    // aligned_alloc wants a size that is a multiple of the alignment; 0 still gets a block.
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    return std::aligned_alloc(kAlignment, rounded);
  }
  void free(void* ptr) noexcept { std::free(ptr); }
  // Host memory: every copy is done when it returns, so every stream is always synchronised.
  void free_async(void* ptr, void*) noexcept { std::free(ptr); }
  void copy(void* dst, const void* src, size_t bytes, kvc_copy_kind, void*) {
    std::memcpy(dst, src, bytes);
  }
  void synchronize(void*) {}

  void append(const kvc_append_job* jobs, const kvc_append_call& call) {
    // Append jobs cannot say whether their K rows are the engine's or stored ones.
    if (k_rotation_ != KVC_ROTATION_NONE)
      fail(KVC_ERR_INVALID_ARGUMENT, "append: an instance that rotates K takes append_tensors");
    run_append(host_, jobs, call.n_jobs, call.head_dim, {call.storage_dtype, call.v_dtype});
  }
  void append_tensors(const kvc_append_slot* slots, const kvc_append_tensors_call& call) {
    run_append_tensors(host_, slots, call, k_rotation_);
  }
  void attend(const kvc_attend_job* jobs, const kvc_attend_call& call) {
    run_attend(host_, jobs, call, k_rotation_);
  }
  void compact(const kvc_compact_job* jobs, const kvc_compact_call& call) {
    run_compact(host_, jobs, call.n_jobs, call.head_dim, {call.storage_dtype, call.v_dtype});
  }
  void read_keys(const kvc_read_keys_job* jobs, const kvc_read_keys_call& call) {
    run_read_keys(host_, jobs, call.n_jobs, call.head_dim, call.storage_dtype);
  }
  void read_tokens(const kvc_read_tokens_job* jobs, const kvc_read_tokens_call& call) {
    run_read_tokens(host_, jobs, call.n_jobs);
  }
  // Rows are converted as they are stored: a rotated K stays rotated (the rotation is per row).
  void convert(const kvc_convert_job* jobs, const kvc_convert_call& call) {
    run_convert(host_, jobs, call);
  }

 private:
  CpuBackend(const kvc_host_api& host, kvc_rotation k_rotation)
      : host_(host), k_rotation_(k_rotation) {}

  const kvc_host_api& host_;
  const kvc_rotation k_rotation_;  // of K on append (the engine's rows) and of queries
};

}  // namespace
}  // namespace kvc::cpu

KVC_BACKEND_PLUGIN(kvc::cpu::CpuBackend, KVC_VERSION_NUMBER);
