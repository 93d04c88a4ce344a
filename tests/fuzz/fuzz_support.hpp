// What the libFuzzer targets share: a context created once, status checks that abort (which
// libFuzzer reports as a crash, with the input), a reader of the fuzz input, and snapshots of
// what a failed call must leave unchanged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"

namespace kvf {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz check failed: %s\n", what.c_str());
  std::abort();
}

inline void check(bool condition, const std::string& what) {
  if (!condition) fail(what);
}

// Releases the status; true on success. An error must have a known code and a message.
inline bool ok(kvc_status* status) {
  if (status == nullptr) return true;
  const kvc_status_code code = kvc_status_get_code(status);
  check(code > KVC_OK && code <= KVC_ERR_IO, "error status with code " + std::to_string(code));
  check(kvc_status_message(status)[0] != '\0', "error status without a message");
  kvc_status_free(status);
  return false;
}

inline void require_ok(kvc_status* status, const char* call) {
  if (status != nullptr) {
    fail(std::string(call) + " failed: " + kvc_status_code_name(kvc_status_get_code(status)) +
         ": " + kvc_status_message(status));
  }
}

inline void discard_log(void*, kvc_log_level, const char*) {}

// One context for the whole run, with the plugins of the default folder next to libkvcache
// (and KVC_PLUGIN_PATH); its logger drops messages. One thread: the caller does all the work,
// so that a run does not depend on scheduling and spends no time handing work to workers.
inline kvc_context* shared_context() {
  static kvc_context* context = [] {
    kvc_context* c = nullptr;
    require_ok(kvc_context_create("threads: 1", &c), "kvc_context_create");
    kvc_context_set_logger(c, discard_log, nullptr, KVC_LOG_OFF);
    return c;
  }();
  return context;
}

// Reads the fuzz input front to back; past the end every read is 0.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{u8()} << (8 * i);
    return v;
  }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  // 0..n-1.
  uint32_t pick(uint32_t n) { return u8() % n; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline kvc_cache_stats stats_of(const kvc_cache* cache) {
  kvc_cache_stats s;
  kvc_cache_stats_init(&s);
  require_ok(kvc_cache_get_stats(cache, &s), "kvc_cache_get_stats");
  check(s.bytes_used <= s.bytes_limit, "bytes_used " + std::to_string(s.bytes_used) +
                                           " above the limit " + std::to_string(s.bytes_limit));
  check(s.bytes_used <= s.bytes_peak, "bytes_used above bytes_peak");
  check(s.bytes_shared <= s.bytes_used, "bytes_shared above bytes_used");
  return s;
}

inline bool same_stats(const kvc_cache_stats& a, const kvc_cache_stats& b) {
  return a.bytes_used == b.bytes_used && a.bytes_peak == b.bytes_peak &&
         a.bytes_limit == b.bytes_limit && a.bytes_reserved == b.bytes_reserved &&
         a.tokens_stored == b.tokens_stored && a.tokens_evicted == b.tokens_evicted &&
         a.bytes_copied == b.bytes_copied && a.blocks_used == b.blocks_used &&
         a.blocks_free == b.blocks_free && a.sequences == b.sequences &&
         a.bytes_shared == b.bytes_shared;
}

inline std::string describe(const kvc_cache_stats& s) {
  return "{used " + std::to_string(s.bytes_used) + ", peak " + std::to_string(s.bytes_peak) +
         ", reserved " + std::to_string(s.bytes_reserved) + ", tokens " +
         std::to_string(s.tokens_stored) + ", evicted " + std::to_string(s.tokens_evicted) +
         ", copied " + std::to_string(s.bytes_copied) + ", blocks " +
         std::to_string(s.blocks_used) + " used " + std::to_string(s.blocks_free) +
         " free, sequences " + std::to_string(s.sequences) + ", shared " +
         std::to_string(s.bytes_shared) + "}";
}

// Stored tokens of every (layer, KV head) of a sequence, in layer-major order; empty when the
// sequence does not exist.
inline std::vector<int32_t> lengths_of(const kvc_cache* cache, int32_t seq, int32_t layers,
                                       int32_t kv_heads) {
  std::vector<int32_t> lengths;
  for (int32_t l = 0; l < layers; ++l) {
    for (int32_t h = 0; h < kv_heads; ++h) {
      int32_t n = -1;
      if (!ok(kvc_seq_length(cache, seq, l, h, &n))) return {};
      check(n >= 0, "negative kvc_seq_length");
      lengths.push_back(n);
    }
  }
  return lengths;
}

// kvc_seq_export's bytes, or empty when it fails.
inline std::vector<uint8_t> export_of(kvc_cache* cache, int32_t seq) {
  size_t size = 0;
  if (!ok(kvc_seq_export_size(cache, seq, &size))) return {};
  std::vector<uint8_t> bytes(size);
  size_t written = 0;
  require_ok(kvc_seq_export(cache, seq, bytes.data(), bytes.size(), &written), "kvc_seq_export");
  check(written == size, "kvc_seq_export wrote other than kvc_seq_export_size");
  return bytes;
}

}  // namespace kvf
