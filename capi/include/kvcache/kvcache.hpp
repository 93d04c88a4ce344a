/**
 * @file kvcache.hpp
 * @brief Header-only C++17 RAII wrapper over the kvcache C API.
 *
 * Errors become kvcache::Error exceptions (thrown on the caller's side of the C boundary).
 * Handles are move-only and release their C object on destruction. Thread safety is that
 * of the underlying C handles (see kvcache.h). A Cache must be destroyed before its Context.
 */
#ifndef KVCACHE_KVCACHE_HPP
#define KVCACHE_KVCACHE_HPP

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_format.h"

namespace kvcache {

/** @brief A failed kvcache call: its status code and message. */
class Error : public std::runtime_error {
 public:
  /** @brief An error with the status code and message of a failed call. */
  Error(kvc_status_code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  /** @brief The status code of the failed call. */
  kvc_status_code code() const noexcept { return code_; }

 private:
  kvc_status_code code_;
};

/** @brief Throws kvcache::Error for a non-NULL status and frees it. */
inline void check(kvc_status* status) {
  if (!status) return;
  kvc_status_code code = kvc_status_get_code(status);
  std::string message = kvc_status_message(status);
  kvc_status_free(status);
  throw Error(code, message);
}

/** @brief The format table's description of @p format (kvc_format_describe()); throws
 * kvcache::Error for a value outside the table. */
inline kvc_format_info describe_format(kvc_dtype format) {
  kvc_format_info info{};
  info.struct_size = sizeof info;
  check(kvc_format_describe(format, &info));
  return info;
}

/** @brief Owns a kvc_context. */
class Context {
 public:
  /** @brief A context from YAML text; "" means defaults. */
  explicit Context(const std::string& yaml = "") {
    kvc_context* raw = nullptr;
    check(kvc_context_create(yaml.c_str(), &raw));
    handle_.reset(raw);
  }
  /** @brief A context from a YAML file. */
  static Context from_file(const std::string& path) {
    kvc_context* raw = nullptr;
    check(kvc_context_create_from_file(path.c_str(), &raw));
    return Context(raw);
  }
  /** @brief Loads the plugins of one shared library. */
  void load_plugin(const std::string& path) { check(kvc_context_load_plugin(get(), path.c_str())); }
  /** @brief Descriptions of every loaded plugin. */
  std::vector<kvc_plugin_info> plugins() const {
    std::vector<kvc_plugin_info> infos(kvc_context_plugin_count(get()));
    for (size_t i = 0; i < infos.size(); ++i) {
      infos[i].struct_size = sizeof(kvc_plugin_info);
      check(kvc_context_plugin_info(get(), i, &infos[i]));
    }
    return infos;
  }
  /** @brief See kvc_context_set_logger(). */
  void set_logger(kvc_log_fn fn, void* user_data, kvc_log_level min_level) {
    kvc_context_set_logger(get(), fn, user_data, min_level);
  }
  /** @brief The C handle, still owned by this object. */
  kvc_context* get() const { return handle_.get(); }

 private:
  explicit Context(kvc_context* raw) : handle_(raw) {}
  struct Deleter {
    void operator()(kvc_context* c) const { kvc_context_destroy(c); }
  };
  std::unique_ptr<kvc_context, Deleter> handle_;
};

/** @brief Owns a kvc_cache. */
class Cache {
 public:
  /** @brief A cache of the given shape. */
  Cache(Context& context, const kvc_cache_params& params) {
    kvc_cache* raw = nullptr;
    check(kvc_cache_create(context.get(), &params, &raw));
    handle_.reset(raw);
  }
  /** @brief A cache from YAML text with a `cache:` section (empty: the context's config). */
  Cache(Context& context, const std::string& yaml) {
    kvc_cache* raw = nullptr;
    check(kvc_cache_create_from_yaml(context.get(), yaml.empty() ? nullptr : yaml.c_str(), &raw));
    handle_.reset(raw);
  }

  /** @brief See kvc_seq_create(). */
  void create_sequence(int32_t seq_id) { check(kvc_seq_create(get(), seq_id)); }
  /** @brief See kvc_seq_remove(). */
  void remove_sequence(int32_t seq_id) { check(kvc_seq_remove(get(), seq_id)); }
  /** @brief See kvc_seq_reserve(). */
  void reserve(int32_t seq_id, int32_t tokens) { check(kvc_seq_reserve(get(), seq_id, tokens)); }
  /** @brief See kvc_seq_fork(): @p dst_seq_id shares the K/V blocks of @p src_seq_id. */
  void fork(int32_t src_seq_id, int32_t dst_seq_id) {
    check(kvc_seq_fork(get(), src_seq_id, dst_seq_id));
  }
  /** @brief See kvc_seq_truncate(): drops the tokens at positions >= @p position. */
  void truncate(int32_t seq_id, int32_t position) {
    check(kvc_seq_truncate(get(), seq_id, position));
  }
  /** @brief See kvc_seq_remove_range(): drops the tokens at positions in [first, end). */
  void remove_range(int32_t seq_id, int32_t first, int32_t end) {
    check(kvc_seq_remove_range(get(), seq_id, first, end));
  }
  /** @brief kvc_seq_export_size() then kvc_seq_export(): the sequence's bytes. */
  std::vector<uint8_t> export_sequence(int32_t seq_id) {
    size_t size = 0;
    check(kvc_seq_export_size(get(), seq_id, &size));
    std::vector<uint8_t> bytes(size);
    size_t written = 0;
    check(kvc_seq_export(get(), seq_id, bytes.data(), bytes.size(), &written));
    bytes.resize(written);
    return bytes;
  }
  /** @brief See kvc_seq_import(): creates @p seq_id from @p size bytes of an export. */
  void import_sequence(int32_t seq_id, const void* data, size_t size) {
    check(kvc_seq_import(get(), seq_id, data, size));
  }
  /** @brief See kvc_seq_import(): creates @p seq_id from the bytes of export_sequence(). */
  void import_sequence(int32_t seq_id, const std::vector<uint8_t>& bytes) {
    import_sequence(seq_id, bytes.data(), bytes.size());
  }
  /** @brief See kvc_seq_export_file(). */
  void export_file(int32_t seq_id, const std::string& path) {
    check(kvc_seq_export_file(get(), seq_id, path.c_str()));
  }
  /** @brief See kvc_seq_import_file(). */
  void import_file(int32_t seq_id, const std::string& path) {
    check(kvc_seq_import_file(get(), seq_id, path.c_str()));
  }
  /** @brief See kvc_seq_view(): the stored segments of (sequence, layer, KV head). */
  std::vector<kvc_segment_view> view(int32_t seq_id, int32_t layer, int32_t kv_head) const {
    size_t count = 0;
    check(kvc_seq_view(get(), seq_id, layer, kv_head, nullptr, 0, &count));
    std::vector<kvc_segment_view> views(count);
    check(kvc_seq_view(get(), seq_id, layer, kv_head, views.data(), views.size(), &count));
    return views;
  }
  /** @brief See kvc_seq_length(). */
  int32_t length(int32_t seq_id, int32_t layer, int32_t kv_head) const {
    int32_t n = 0;
    check(kvc_seq_length(get(), seq_id, layer, kv_head, &n));
    return n;
  }
  /** @brief See kvc_append(). */
  void append(int32_t layer, const kvc_batch& batch, const kvc_tensor& k, const kvc_tensor& v) {
    check(kvc_append(get(), layer, &batch, &k, &v));
  }
  /** @brief See kvc_attend(). */
  void attend(int32_t layer, const kvc_batch& batch, const kvc_tensor& q, kvc_tensor_mut& out,
              const kvc_attention_params* params = nullptr) {
    check(kvc_attend(get(), layer, &batch, &q, params, &out));
  }
  /** @brief See kvc_append_attend(). */
  void append_attend(int32_t layer, const kvc_batch& batch, const kvc_tensor& q,
                     const kvc_tensor& k, const kvc_tensor& v, kvc_tensor_mut& out,
                     const kvc_attention_params* params = nullptr) {
    check(kvc_append_attend(get(), layer, &batch, &q, &k, &v, params, &out));
  }
  /** @brief See kvc_cache_get_stats() (bytes_shared: blocks several forked sequences hold). */
  kvc_cache_stats stats() const {
    kvc_cache_stats s;
    kvc_cache_stats_init(&s);
    check(kvc_cache_get_stats(get(), &s));
    return s;
  }
  /** @brief See kvc_cache_policy_info(); throws a NOT_FOUND Error for a cache without policy. */
  kvc_policy_info policy_info() const {
    kvc_policy_info info;
    kvc_policy_info_init(&info);
    check(kvc_cache_policy_info(get(), &info));
    return info;
  }
  /** @brief The C handle, still owned by this object. */
  kvc_cache* get() const { return handle_.get(); }

 private:
  struct Deleter {
    void operator()(kvc_cache* c) const { kvc_cache_destroy(c); }
  };
  std::unique_ptr<kvc_cache, Deleter> handle_;
};

}  // namespace kvcache

#endif /* KVCACHE_KVCACHE_HPP */
