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

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"

namespace kvcache {

/** @brief A failed kvcache call: its status code and message (kvcache_error.hpp). */
using Error = kvc::Error;

/** @brief Throws kvcache::Error for a non-NULL status and frees it. */
inline void check(kvc_status* status) {
  if (!status) return;
  kvc_status_code code = kvc_status_get_code(status);
  std::string message = kvc_status_message(status);
  kvc_status_free(status);
  throw Error(code, message);
}

/** @brief See kvc_version(): MAJOR*10000 + MINOR*100 + PATCH of the loaded library. */
inline uint32_t version() { return kvc_version(); }
/** @brief See kvc_version_string(). */
inline std::string version_string() { return kvc_version_string(); }
/** @brief See kvc_status_code_name(). */
inline std::string status_code_name(kvc_status_code code) { return kvc_status_code_name(code); }
/** @brief See kvc_dtype_size(); 0 for a value that is not a kvc_dtype. */
inline size_t dtype_size(kvc_dtype dtype) { return kvc_dtype_size(dtype); }
/** @brief See kvc_dtype_name(). */
inline std::string dtype_name(kvc_dtype dtype) { return kvc_dtype_name(dtype); }

/** @brief The defaults of kvc_cache_params_init(). */
inline kvc_cache_params cache_params() {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  return p;
}
/** @brief The defaults of kvc_attention_params_init(). */
inline kvc_attention_params attention_params() {
  kvc_attention_params p;
  kvc_attention_params_init(&p);
  return p;
}
/** @brief See kvc_batch_init(); the arrays must outlive the batch's use. */
inline kvc_batch batch(int32_t n_seqs, const int32_t* seq_ids, const int32_t* n_tokens,
                       const int32_t* positions) {
  kvc_batch b;
  kvc_batch_init(&b, n_seqs, seq_ids, n_tokens, positions);
  return b;
}
/** @brief See kvc_estimate_request_init(). */
inline kvc_estimate_request estimate_request(int32_t prompt_tokens, int32_t chunk_tokens,
                                             int32_t new_tokens) {
  kvc_estimate_request r;
  kvc_estimate_request_init(&r, prompt_tokens, chunk_tokens, new_tokens);
  return r;
}
/** @brief See kvc_prefix_init(); @p model and @p token_ids must outlive the prefix's use. */
inline kvc_prefix prefix(const char* model, const std::vector<int32_t>& token_ids) {
  kvc_prefix p;
  kvc_prefix_init(&p, model, token_ids.data(), static_cast<int32_t>(token_ids.size()));
  return p;
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
  /** @brief See kvc_context_plugin_count(). */
  size_t plugin_count() const { return kvc_context_plugin_count(get()); }
  /** @brief See kvc_context_plugin_info(): plugin @p index (0 .. plugin_count()-1). */
  kvc_plugin_info plugin(size_t index) const {
    kvc_plugin_info info{};
    info.struct_size = sizeof(kvc_plugin_info);
    check(kvc_context_plugin_info(get(), index, &info));
    return info;
  }
  /** @brief See kvc_store_drop(). */
  void store_drop(const std::string& store, const std::string& key) {
    check(kvc_store_drop(get(), store.c_str(), key.c_str()));
  }
  /** @brief Descriptions of every loaded plugin. */
  std::vector<kvc_plugin_info> plugins() const {
    std::vector<kvc_plugin_info> infos;
    for (size_t i = 0; i < plugin_count(); ++i) infos.push_back(plugin(i));
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

  /** @brief See kvc_cache_set_stream(): the stream of every call that names none (NULL: the
   * backend's default); needs the cache to itself. */
  void set_stream(void* stream) { check(kvc_cache_set_stream(get(), stream)); }

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
  /** @brief See kvc_cache_get_stats() (bytes_shared: blocks several sequences hold, forked or
   * attached; bytes_cached: blocks only the prefix cache holds). */
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
  /** @brief See kvc_cache_get_params(); its strings are owned by the cache. */
  kvc_cache_params params() const {
    kvc_cache_params p = cache_params();
    check(kvc_cache_get_params(get(), &p));
    return p;
  }
  /** @brief See kvc_compress(); @p layer -1: every layer. */
  void compress(int32_t layer, const std::vector<int32_t>& seq_ids) {
    check(kvc_compress(get(), layer, static_cast<int32_t>(seq_ids.size()), seq_ids.data()));
  }
  /** @brief See kvc_report_stats(): one value per stored token, in storage order. */
  void report_stats(int32_t seq_id, int32_t layer, int32_t kv_head, kvc_stat_kind kind,
                    const std::vector<float>& values) {
    check(kvc_report_stats(get(), seq_id, layer, kv_head, kind, values.data(),
                           static_cast<int32_t>(values.size())));
  }
  /** @brief See kvc_cache_estimate_peak_bytes(). */
  size_t estimate_peak_bytes(int32_t prompt_tokens, int32_t chunk_tokens,
                             int32_t new_tokens) const {
    size_t bytes = 0;
    check(kvc_cache_estimate_peak_bytes(get(), prompt_tokens, chunk_tokens, new_tokens, &bytes));
    return bytes;
  }
  /** @brief See kvc_cache_estimate(). */
  size_t estimate(const kvc_estimate_request& request) const {
    size_t bytes = 0;
    check(kvc_cache_estimate(get(), &request, &bytes));
    return bytes;
  }
  /** @brief See kvc_seq_offload(). */
  void offload(int32_t seq_id, const std::string& store, const std::string& key) {
    check(kvc_seq_offload(get(), seq_id, store.c_str(), key.c_str()));
  }
  /** @brief See kvc_seq_restore(). */
  void restore(int32_t seq_id, const std::string& store, const std::string& key) {
    check(kvc_seq_restore(get(), seq_id, store.c_str(), key.c_str()));
  }
  /** @brief See kvc_prefix_save(); returns the tokens the saved chunks cover. */
  int32_t prefix_save(int32_t seq_id, const std::string& store, const kvc_prefix& prefix) {
    int32_t saved = 0;
    check(kvc_prefix_save(get(), seq_id, store.c_str(), &prefix, &saved));
    return saved;
  }
  /** @brief See kvc_prefix_load(); returns the tokens restored (a multiple of chunk_tokens). */
  int32_t prefix_load(int32_t seq_id, const std::string& store, const kvc_prefix& prefix) {
    int32_t restored = 0;
    check(kvc_prefix_load(get(), seq_id, store.c_str(), &prefix, &restored));
    return restored;
  }
  /** @brief See kvc_prefix_attach() (a cache with prefix_cache); returns the tokens attached (a
   * multiple of block_tokens). */
  int32_t prefix_attach(int32_t seq_id, const kvc_prefix& prefix) {
    int32_t attached = 0;
    check(kvc_prefix_attach(get(), seq_id, &prefix, &attached));
    return attached;
  }
  /** @brief See kvc_prefix_publish(); returns the tokens the findable blocks cover. */
  int32_t prefix_publish(int32_t seq_id, const kvc_prefix& prefix) {
    int32_t published = 0;
    check(kvc_prefix_publish(get(), seq_id, &prefix, &published));
    return published;
  }
  /** @brief See kvc_prefix_lookup(): the tokens prefix_attach() would attach from the cache now. */
  int32_t prefix_lookup(const kvc_prefix& prefix) const {
    int32_t tokens = 0;
    check(kvc_prefix_lookup(get(), &prefix, &tokens));
    return tokens;
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
