// One instance of a backend plugin, owned by a cache: builds the versioned call structs and
// turns plugin error codes into kvc::Error.
#pragma once

#include <string>
#include <vector>

#include "kvcache/kvcache_plugin.h"
#include "config.hpp"
#include "plugin_registry.hpp"

namespace kvc {

class Backend {
 public:
  // Creates the instance with create_with_config (ABI 1.3) when the plugin has it, else create.
  Backend(const LoadedPlugin& plugin, const kvc_host_api* host, const CacheConfig& config);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const { return name_; }
  // The stream of every call below given none (NULL): the cache's (kvc_cache_set_stream).
  void set_default_stream(void* stream) { default_stream_ = stream; }
  // Device memory, NULL when the device is exhausted.
  void* alloc(size_t bytes) { return vtable_.alloc(instance_, bytes); }
  // Ordered on the stream where the backend has free_async.
  void free(void* ptr, void* stream = nullptr);
  // Ordered on the stream; returns once host memory on either side is read or written. A
  // device-to-device copy on a stream may still be running.
  void copy(void* dst, const void* src, size_t bytes, kvc_copy_kind kind, void* stream = nullptr);
  // `call` holds the source tensors, their positions and the stream; its shape, formats, slots
  // and struct_size are filled in here. A backend without append_tensors (ABI < 1.4) gets
  // the same append as one kvc_append_job per slot.
  void append(const std::vector<kvc_append_slot>& slots, kvc_append_tensors_call call);
  // `call` holds the options; its jobs, shape and struct_size are filled in here.
  void attend(const std::vector<kvc_attend_job>& jobs, kvc_attend_call call);
  void compact(const std::vector<kvc_compact_job>& jobs, void* stream);
  void read_keys(const std::vector<kvc_read_keys_job>& jobs, void* stream);
  // Positions and statistics into host memory: one read_tokens call, or, for a backend
  // without it (ABI 1.0), one copy per segment and statistic.
  void read_tokens(const std::vector<kvc_read_tokens_job>& jobs, void* stream);
  // Whether the backend re-encodes stored rows (ABI 1.6 convert), which demotion needs; a
  // backend that has it also reads segments with their own formats.
  bool converts() const { return vtable_.convert != nullptr; }
  void convert(const std::vector<kvc_convert_job>& jobs, void* stream);

 private:
  void check(int32_t code, const kvc_plugin_error& error, const char* what) const;
  void* on(void* stream) const { return stream ? stream : default_stream_; }
  void read_tokens_by_copy(const kvc_read_tokens_job& job, void* stream);
  void append_by_jobs(const kvc_append_tensors_call& call);

  std::string name_;
  kvc_backend_vtable vtable_;
  int32_t head_dim_;
  int32_t kv_heads_;
  kvc_dtype k_dtype_;
  kvc_dtype v_dtype_;
  void* instance_ = nullptr;
  void* default_stream_ = nullptr;
};

}  // namespace kvc
