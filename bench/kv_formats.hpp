// The K and V storage formats of a benchmark's cache, chosen apart as kvc_cache_params'
// k_dtype and v_dtype are: --dtype sets both, --k_format and --v_format override either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvcache/kvcache.h"
#include "options.hpp"

namespace kvc_bench {

struct KvFormats {
  kvc_dtype k = KVC_DTYPE_F16;
  kvc_dtype v = KVC_DTYPE_F16;

  /// "q8_0" when K and V share the format, else "K/V" such as "q8_0/q4_0" (as --formats
  /// takes them).
  std::string name() const;
  /// name() as part of a report key: "q8_0", "q8_0_q4_0".
  std::string key() const;
  /// K or V stores scales (q8_0, q4_0).
  bool quantized() const;
  /// Bytes of one token's K row plus its V row for one KV head; 0 when a format's group does
  /// not divide head_dim.
  size_t kv_row_bytes(int32_t head_dim) const;
  /// Sets the cache's dtype (K's), k_dtype and v_dtype.
  void apply(kvc_cache_params* params) const;

  bool operator==(const KvFormats& other) const { return k == other.k && v == other.v; }
};

/// "F" (both) or "K/V", each a format name of the table; throws UsageError naming @p option.
KvFormats parse_kv_formats(const std::string& text, const char* option);

/// --dtype (both, default f16), then --k_format and --v_format where given.
KvFormats read_kv_formats(Options& opts);

/// Any of --dtype, --k_format, --v_format was given.
bool kv_formats_given(const Options& opts);

/// Throws UsageError unless both formats' groups divide @p head_dim (32 for q8_0 and q4_0).
void check_head_dim(const KvFormats& formats, int32_t head_dim);

/// Reports `<prefix>k_format` and `<prefix>v_format`.
void report_kv_formats(const std::string& prefix, const KvFormats& formats);

}  // namespace kvc_bench
