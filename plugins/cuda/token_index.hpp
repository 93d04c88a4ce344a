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

// Appends the segments of one job (and the first key index of each) to the upload; stores
// their offsets in `segments_at` and `begins_at`.
inline void add_segments(Upload& upload, const kvc_segment* segments, int32_t n_segments,
                         size_t& segments_at, size_t& begins_at) {
  std::vector<DevSegment> dev(size_t(n_segments > 0 ? n_segments : 0));
  std::vector<int64_t> begins(dev.size());
  int64_t key = 0;
  for (size_t s = 0; s < dev.size(); ++s) {
    dev[s] = {segments[s].k, segments[s].v, segments[s].pos, segments[s].count};
    begins[s] = key;
    key += segments[s].count;
  }
  segments_at = upload.add_array(dev.data(), dev.size());
  begins_at = upload.add_array(begins.data(), begins.size());
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
