// An out-of-tree backend built against the installed skeleton (kvcache/kvcache_backend_plugin.hpp)
// and nothing else of kvcache: host memory and copies; its data calls say it has no kernels,
// which a real backend would provide here. check_package.sh loads it into a context.
#include <cstdlib>
#include <cstring>

#include "kvcache/kvcache_backend_plugin.hpp"

namespace {

class HostBackend {
 public:
  static constexpr const char* kName = "package_host";
  static constexpr const char* kLabel = "package_host backend";

  static HostBackend* create(const kvc_host_api&, const kvc_backend_config* config) {
    if (config) kvc::plugin::refuse_params(*config);
    return new HostBackend;
  }
  void* alloc(size_t bytes) noexcept { return std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64); }
  void free(void* ptr) noexcept { std::free(ptr); }
  void free_async(void* ptr, void*) noexcept { std::free(ptr); }
  void copy(void* dst, const void* src, size_t bytes, kvc_copy_kind, void*) {
    std::memcpy(dst, src, bytes);
  }
  void synchronize(void*) {}
  void append(const kvc_append_job*, const kvc_append_call&) { no_kernels(); }
  void attend(const kvc_attend_job*, const kvc_attend_call&) { no_kernels(); }
  void compact(const kvc_compact_job*, const kvc_compact_call&) { no_kernels(); }
  void read_keys(const kvc_read_keys_job*, const kvc_read_keys_call&) { no_kernels(); }
  void read_tokens(const kvc_read_tokens_job*, const kvc_read_tokens_call&) { no_kernels(); }

 private:
  [[noreturn]] static void no_kernels() { kvc::plugin::fail(KVC_ERR_UNSUPPORTED, "no kernels"); }
};

}  // namespace

KVC_BACKEND_PLUGIN(HostBackend, 1);
