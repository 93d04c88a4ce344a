// The flattened token index of calls whose jobs each cover a run of tokens (append, compact,
// read_keys, read_tokens): job j owns tokens [begins[j], begins[j + 1]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device_types.hpp"
#include "kvcache/kvcache_plugin.h"
#include "staging.hpp"

namespace kvc::cuda {

// A job's segment table in device memory: its DevSegment array, then at this offset its
// int64 first keys; table_bytes in all.
inline size_t table_begins_offset(size_t n_segments) {
  return (n_segments * sizeof(DevSegment) + Upload::kAlign - 1) / Upload::kAlign * Upload::kAlign;
}
inline size_t table_bytes(size_t n_segments) {
  return table_begins_offset(n_segments) + n_segments * sizeof(int64_t);
}

// Appends the segments of one job (and the first key index of each) to the upload, as one
// table (table_bytes at `segments_at`); stores the offsets in `segments_at` and `begins_at`.
// Written in place: decode calls over paged caches carry hundreds of thousands of segments.
inline void add_segments(Upload& upload, const kvc_segment* segments, int32_t n_segments,
                         size_t& segments_at, size_t& begins_at) {
  const size_t n = size_t(n_segments > 0 ? n_segments : 0);
  segments_at = upload.add(nullptr, table_bytes(n));
  begins_at = segments_at + table_begins_offset(n);
  DevSegment* dev = upload.at<DevSegment>(segments_at);
  int64_t* begins = upload.at<int64_t>(begins_at);
  int64_t key = 0;
  for (size_t s = 0; s < n; ++s) {
    dev[s] = {segments[s].k, segments[s].v, segments[s].pos};
    begins[s] = key;
    key += segments[s].count;
  }
}

// The first flattened token of each job and the total, from each job's token count.
inline int64_t token_begins(const std::vector<int32_t>& counts, std::vector<int64_t>& begins) {
  begins.resize(counts.size());
  int64_t total = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    begins[j] = total;
    total += counts[j];
  }
  return total;
}

}  // namespace kvc::cuda
