// Errors, kvc_status checking and dtype helpers shared by kvc-bench subcommands.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_half.h"

namespace kvc_bench {

/// A failure while running a benchmark: printed, exit status 1.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Bad command-line input: printed with the usage, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Throws Error("<what>: <CODE>: <message>") for a non-NULL status, which it frees.
inline void check(kvc_status* status, const char* what) {
  if (status == nullptr) return;
  std::string msg = std::string(what) + ": " + kvc_status_code_name(kvc_status_get_code(status)) +
                    ": " + kvc_status_message(status);
  kvc_status_free(status);
  throw Error(msg);
}

inline const char* dtype_name(kvc_dtype dtype) { return kvc_dtype_name(dtype); }

/// Parses "f32", "f16" or "bf16"; throws UsageError naming @p option otherwise.
inline kvc_dtype parse_dtype(const std::string& text, const char* option) {
  if (text == "f32") return KVC_DTYPE_F32;
  if (text == "f16") return KVC_DTYPE_F16;
  if (text == "bf16") return KVC_DTYPE_BF16;
  throw UsageError(std::string("--") + option + ": expected f32, f16 or bf16, got '" + text + "'");
}

/// Converts @p n floats to @p dtype at @p dst.
inline void convert_from_f32(const float* src, void* dst, size_t n, kvc_dtype dtype) {
  if (dtype == KVC_DTYPE_F32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  if (dtype == KVC_DTYPE_F16) {
    for (size_t i = 0; i < n; ++i) out[i] = kvc_f32_to_f16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = kvc_f32_to_bf16(src[i]);
  }
}

}  // namespace kvc_bench
