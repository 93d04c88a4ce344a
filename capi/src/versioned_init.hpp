// The *_init_sized functions' one rule (kvcache.h conventions): the oldest layout of each
// struct with an exported _init, and how a caller's struct of struct_size bytes is filled.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvcache/kvcache.h"

namespace kvc {

// The smallest size a header with the struct's _init ever declared: what the exported
// kvc_X_init symbols write (a binary built against an older header cannot say which it was)
// and the least the _sized functions accept. A struct that grows keeps its entry here.
template <typename T>
inline constexpr size_t oldest_layout = sizeof(T);
// The first release (d4a5c38) had no stream and prompt_end.
template <>
inline constexpr size_t oldest_layout<kvc_batch> = offsetof(kvc_batch, stream);
// kvc_cache_stats_init came before bytes_shared.
template <>
inline constexpr size_t oldest_layout<kvc_cache_stats> = offsetof(kvc_cache_stats, bytes_shared);
// The C ABI 1.0's kvc_cache_params ended where k_dtype now starts, padded to the struct's
// alignment (k_dtype lies in that padding; v_dtype past it).
template <>
inline constexpr size_t oldest_layout<kvc_cache_params> =
    (offsetof(kvc_cache_params, k_dtype) + alignof(kvc_cache_params) - 1) /
    alignof(kvc_cache_params) * alignof(kvc_cache_params);
static_assert(oldest_layout<kvc_cache_params> <= offsetof(kvc_cache_params, v_dtype));

// Copies `value` (struct_size ignored) into the caller's struct of `struct_size` bytes: the
// fields that fit, zeros past the fields this library knows, then struct_size. Writes nothing
// for NULL or a size outside [oldest_layout<T>, UINT32_MAX].
template <typename T>
void init_versioned(T* out, size_t struct_size, const T& value) {
  if (!out || struct_size < oldest_layout<T> || struct_size > UINT32_MAX) return;
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  const size_t known = std::min(struct_size, sizeof(T));
  std::memcpy(bytes, &value, known);
  std::memset(bytes + known, 0, struct_size - known);
  const auto size = static_cast<uint32_t>(struct_size);
  std::memcpy(bytes + offsetof(T, struct_size), &size, sizeof size);
}

}  // namespace kvc
