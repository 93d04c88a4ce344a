// What the attention kernels share (attend.cu on CUDA cores, attend_mma*.cu on tensor cores):
// the launch parameters, the launch of one block per work item, where an output row goes, and
// the cursor that walks a job's segments while a block copies its keys into shared memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda_check.hpp"
#include "device_types.hpp"

namespace kvc::cuda {

struct AttendParams {
  const DevAttendJob* jobs;
  const WorkItem* items;
  float* part_acc;       // [n_parts][rows_per_item][head_dim], unnormalised
  RowState* part_rows;   // [n_parts][rows_per_item]
  int32_t head_dim;
  int32_t group;
  int32_t window;
  int32_t lanes_per_key;
  int32_t n_chunks;      // 16-byte chunks of a row (the last may be partial)
  int32_t rows_per_item;
  float scale;
  float softcap;
  int32_t vector_loads;  // every row is 16-byte aligned
};

// One block of `threads` per work item, with `bytes` of dynamic shared memory (past the 48 KB a
// kernel gets without asking).
inline void launch_blocks(int threads, void (*kernel)(AttendParams), size_t bytes, size_t items,
                          const AttendParams& params, cudaStream_t stream) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
             "raising an attention kernel's shared memory");
  kernel<<<unsigned(items), unsigned(threads), bytes, stream>>>(params);
}

__device__ __forceinline__ float* output_row(const DevAttendJob& job, int32_t row, int32_t group,
                                             int32_t head_dim) {
  return job.out + int64_t(row / group) * job.out_stride + int64_t(row % group) * head_dim;
}

// The segment holding a key, for a thread whose keys only grow: it only moves forward, and
// reloads the segment's pointers only when a key crosses into the next one.
struct SegmentCursor {
  const DevAttendJob& job;
  int32_t segment;
  DevSegment current{};
  int64_t current_begin = 0;
  int64_t next_begin = INT64_MAX;

  // Positioned at first_key (any value when the job has no keys).
  __device__ SegmentCursor(const DevAttendJob& j, int32_t first_key)
      : job(j), segment(j.n_keys > 0 ? find_range(j.segment_begins, j.n_segments, first_key) : 0) {
    if (j.n_keys > 0) enter(segment);
  }
  __device__ void enter(int32_t to) {
    segment = to;
    current = job.segments[segment];
    current_begin = job.segment_begins[segment];
    next_begin = segment + 1 < job.n_segments ? job.segment_begins[segment + 1] : INT64_MAX;
  }
  // The key's index within its segment (the cursor moves there).
  __device__ int64_t local(int32_t key) {
    while (key >= next_begin) enter(segment + 1);
    return key - current_begin;
  }
};

}  // namespace kvc::cuda
