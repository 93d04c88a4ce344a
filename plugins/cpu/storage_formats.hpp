// The storage formats of K and V rows (kvcache_format.h): a call's, or a segment's own.
#pragma once

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

struct StorageFormats {
  kvc_dtype k;
  kvc_dtype v;
  bool operator==(const StorageFormats& other) const { return k == other.k && v == other.v; }
  bool operator!=(const StorageFormats& other) const { return !(*this == other); }
};

// The formats of a segment's rows: its own (ABI 1.6, a head's demoted tier) or the call's.
inline StorageFormats segment_formats(const kvc_segment& segment, const StorageFormats& call) {
  return segment.own_formats ? StorageFormats{segment.k_dtype, segment.v_dtype} : call;
}

}  // namespace kvc::cpu
