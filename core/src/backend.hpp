// One instance of a backend plugin, owned by a cache. Turns plugin error codes into kvc::Error.
#pragma once

#include <string>
#include <vector>

#include "kvcache/kvcache_plugin.h"
#include "plugin_registry.hpp"

namespace kvc {

class Backend {
 public:
  Backend(const LoadedPlugin& plugin, const kvc_host_api* host);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const { return name_; }
  // Device memory, NULL when the device is exhausted.
  void* alloc(size_t bytes) { return vtable_.alloc(instance_, bytes); }
  void free(void* ptr) { vtable_.free(instance_, ptr); }
  void copy(void* dst, const void* src, size_t bytes, kvc_copy_kind kind);
  void append(const std::vector<kvc_append_job>& jobs, int32_t head_dim, kvc_dtype storage);
  void attend(const std::vector<kvc_attend_job>& jobs, const kvc_attend_config& config);
  void compact(const std::vector<kvc_compact_job>& jobs, int32_t head_dim, kvc_dtype storage);
  // The keys of one (sequence, layer, KV head) as f32 rows in host memory.
  void read_keys(const std::vector<kvc_segment>& segments, float* out, int32_t head_dim,
                 kvc_dtype storage);

 private:
  void check(int32_t code, const kvc_plugin_error& error, const char* what) const;

  std::string name_;
  kvc_backend_vtable vtable_;
  void* instance_ = nullptr;
};

}  // namespace kvc
