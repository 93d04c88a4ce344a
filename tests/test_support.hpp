// Small helpers shared by the C API test files: status ownership, RAII handles, and
// check macros that print the status's code and message on failure.
#pragma once

#include <doctest/doctest.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"

namespace kvt {

// Owns a kvc_status*.
class Status {
 public:
  explicit Status(kvc_status* s = nullptr) : s_(s) {}
  Status(const Status&) = delete;
  Status& operator=(const Status&) = delete;
  Status(Status&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  ~Status() { kvc_status_free(s_); }
  bool ok() const { return s_ == nullptr; }
  kvc_status_code code() const { return kvc_status_get_code(s_); }
  std::string message() const { return kvc_status_message(s_); }
  std::string describe() const {
    if (!s_) return "OK";
    return std::string(kvc_status_code_name(code())) + ": " + message();
  }

 private:
  kvc_status* s_;
};

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct ContextDeleter {
  void operator()(kvc_context* c) const { kvc_context_destroy(c); }
};
struct CacheDeleter {
  void operator()(kvc_cache* c) const { kvc_cache_destroy(c); }
};
using ContextPtr = std::unique_ptr<kvc_context, ContextDeleter>;
using CachePtr = std::unique_ptr<kvc_cache, CacheDeleter>;

inline bool stats_equal(const kvc_cache_stats& a, const kvc_cache_stats& b) {
  return a.bytes_used == b.bytes_used && a.bytes_peak == b.bytes_peak &&
         a.bytes_limit == b.bytes_limit && a.bytes_reserved == b.bytes_reserved &&
         a.tokens_stored == b.tokens_stored && a.tokens_evicted == b.tokens_evicted &&
         a.bytes_copied == b.bytes_copied && a.blocks_used == b.blocks_used &&
         a.blocks_free == b.blocks_free && a.sequences == b.sequences;
}

inline std::string stats_string(const kvc_cache_stats& s) {
  return "{used=" + std::to_string(s.bytes_used) + " peak=" + std::to_string(s.bytes_peak) +
         " limit=" + std::to_string(s.bytes_limit) +
         " reserved=" + std::to_string(s.bytes_reserved) +
         " tokens=" + std::to_string(s.tokens_stored) +
         " evicted=" + std::to_string(s.tokens_evicted) +
         " copied=" + std::to_string(s.bytes_copied) +
         " blocks_used=" + std::to_string(s.blocks_used) +
         " blocks_free=" + std::to_string(s.blocks_free) +
         " seqs=" + std::to_string(s.sequences) + "}";
}

}  // namespace kvt

// Fails the test case (REQUIRE) or the check (CHECK) when the call returns an error status.
#define KVT_REQUIRE_OK(expr)                                                   \
  do {                                                                         \
    ::kvt::Status kvt_st_{(expr)};                                             \
    if (!kvt_st_.ok()) FAIL(#expr " failed: " << kvt_st_.describe());          \
  } while (0)

#define KVT_CHECK_OK(expr)                                                     \
  do {                                                                         \
    ::kvt::Status kvt_st_{(expr)};                                             \
    if (!kvt_st_.ok()) FAIL_CHECK(#expr " failed: " << kvt_st_.describe());    \
  } while (0)

// Checks that the call fails with the given code and a non-empty message.
#define KVT_CHECK_ERR(expr, expected_code)                                     \
  do {                                                                         \
    ::kvt::Status kvt_st_{(expr)};                                             \
    INFO(#expr " returned " << kvt_st_.describe());                            \
    CHECK(kvt_st_.code() == (expected_code));                                  \
    if (!kvt_st_.ok()) CHECK(!kvt_st_.message().empty());                      \
  } while (0)

namespace kvt {

// The backend the suites run against (KVC_TEST_BACKEND; unset: the default, cpu) and the
// plugin it comes from when it is not in the default folder (KVC_TEST_BACKEND_PLUGIN).
inline const char* test_backend() { return std::getenv("KVC_TEST_BACKEND"); }

inline ContextPtr make_context(const char* yaml = nullptr) {
  kvc_context* ctx = nullptr;
  Status st{kvc_context_create(yaml, &ctx)};
  if (!st.ok()) FAIL("kvc_context_create failed: " << st.describe());
  REQUIRE(ctx != nullptr);
  if (const char* plugin = std::getenv("KVC_TEST_BACKEND_PLUGIN")) {
    Status loaded{kvc_context_load_plugin(ctx, plugin)};
    if (!loaded.ok()) FAIL("loading the test backend failed: " << loaded.describe());
  }
  return ContextPtr(ctx);
}

// A cache from `p`; one that names no backend gets the test backend.
inline CachePtr make_cache(kvc_context* ctx, kvc_cache_params p) {
  if (p.backend == nullptr) p.backend = test_backend();
  kvc_cache* cache = nullptr;
  Status st{kvc_cache_create(ctx, &p, &cache)};
  if (!st.ok()) FAIL("kvc_cache_create failed: " << st.describe());
  REQUIRE(cache != nullptr);
  return CachePtr(cache);
}

inline kvc_cache_stats get_stats(const kvc_cache* cache) {
  kvc_cache_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  Status st{kvc_cache_get_stats(cache, &s)};
  if (!st.ok()) FAIL("kvc_cache_get_stats failed: " << st.describe());
  return s;
}

inline int32_t seq_length(const kvc_cache* cache, int32_t seq, int32_t layer, int32_t head) {
  int32_t n = -12345;
  Status st{kvc_seq_length(cache, seq, layer, head, &n)};
  if (!st.ok()) FAIL("kvc_seq_length failed: " << st.describe());
  return n;
}

inline kvc_tensor tensor(const void* data, kvc_dtype dtype, size_t row_stride = 0) {
  kvc_tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = KVC_DEVICE_HOST;
  t.row_stride = row_stride;
  return t;
}

inline kvc_tensor_mut tensor_mut(void* data, size_t row_stride = 0) {
  kvc_tensor_mut t;
  t.data = data;
  t.dtype = KVC_DTYPE_F32;
  t.device = KVC_DEVICE_HOST;
  t.row_stride = row_stride;
  return t;
}

}  // namespace kvt
