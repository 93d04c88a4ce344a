// What the host uploads for a call: plain structs the kernels read, built from the call's
// jobs by the launchers (every pointer is device memory).
#pragma once

#include <stdint.h>

#include "device_math.hpp"

namespace kvc::cuda {

// One segment of a job's stored tokens. Jobs list their segments in an array of these and
// their first key indices in a parallel int64 array (for find_range); a segment's count is
// the next one's first key (the job's key count for the last), so a table kept between calls
// (resident_tables.hpp) stays right while its last segment fills.
struct DevSegment {
  const void* k;
  const void* v;
  const int32_t* pos;
};

struct DevStats {
  float* sum;
  float* last;
  float* window;
};

struct DevAppendJob {
  const void* src_k;
  const void* src_v;
  int64_t src_k_stride;  // elements
  int64_t src_v_stride;
  const int32_t* src_pos;
  void* dst_k;
  void* dst_v;
  int32_t* dst_pos;
  DevStats dst_stats;
  int32_t src_dtype;    // of src_k
  int32_t src_v_dtype;  // of src_v
};

struct DevAttendJob {
  const void* q;      // row (query i, head g) at q + i * q_stride + g * head_dim elements
  int64_t q_stride;
  int32_t q_dtype;
  int32_t n_queries;
  const int32_t* q_pos;
  float* out;         // row (i, g) at out + i * out_stride + g * head_dim
  int64_t out_stride;
  const DevSegment* segments;
  const int64_t* segment_begins;  // [n_segments] first key index of each
  int32_t n_segments;
  int32_t n_keys;
  DevStats stats;     // all NULL without statistics
  RowState* rows;     // [n_queries * group] final state of each row (for the statistics)
};

// Rows [row_begin, row_begin + n_rows) of a job (row = query * group + head) over keys
// [key_begin, key_end): one thread block. part < 0: it sees every key and writes the
// output; else it leaves partial state `part` for the merge.
struct WorkItem {
  int32_t job;
  int32_t row_begin;
  int32_t n_rows;
  int32_t key_begin;
  int32_t key_end;
  int32_t part;
};

// The parts [first_part, first_part + n_parts) of rows [row_begin, row_begin + n_rows) of a
// job, which the merge combines into the output.
struct SplitRows {
  int32_t job;
  int32_t row_begin;
  int32_t n_rows;
  int32_t first_part;
  int32_t n_parts;
};

struct DevCompactJob {
  const DevSegment* segments;
  const int64_t* segment_begins;
  int32_t n_segments;
  const int32_t* keep;
  DevStats stats;
};

struct DevTokensJob {
  const DevSegment* segments;
  const int64_t* segment_begins;
  int32_t n_segments;
};

}  // namespace kvc::cuda
