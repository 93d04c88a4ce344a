// attend: grouped-query attention of each job's queries over its stored segments, and the
// choice among its kernels: on tensor cores (attend_mma.cu, attend_mma_decode.cu) for f16 and
// bf16 where they apply, else the two CUDA-core kernels here. One thread block per work item
// (attend_plan.hpp): its four warps split the item's keys; within a warp, lanes_per_key lanes
// read one key's K and V rows in 16-byte chunks and every query row (query token x group head)
// of the item uses that read, so a GQA group reads its K/V once. Each group of lanes keeps its
// own online softmax; the block merges them, and a split-K merge combines the parts of long
// caches. The policy statistics are a second kernel of the same call that re-scores each key
// against the rows' final softmax state.
#include <cuda_pipeline.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "attend_kernels.cuh"
#include "attend_mma.hpp"
#include "attend_plan.hpp"
#include "attend_tables.hpp"
#include "cuda_check.hpp"
#include "device_types.hpp"
#include "instance.hpp"
#include "token_index.hpp"
#include "validation.hpp"

namespace kvc::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStatKeys = 128;  // keys per block of the statistics kernel
// Split-K aims at this many blocks per multiprocessor: several waves of the few that fit at
// once, so that the last wave's idle share stays small.
constexpr int64_t kBlocksPerMultiprocessor = 32;

template <int DT>
__host__ __device__ constexpr int chunk_elems() {
  return DT == kF32 ? 4 : 8;
}
// Rows per item and keys in flight per lane shrink as a lane holds more chunks of a row, so
// that q, acc and the loaded chunks stay in registers.
template <int CPL>
__host__ __device__ constexpr int row_cap() {
  return CPL == 1 ? 4 : CPL == 2 ? 2 : 1;
}
template <int CPL>
__host__ __device__ constexpr int unroll() {
  return CPL == 1 ? 4 : CPL == 2 ? 2 : 1;
}


template <int DT>
__device__ __forceinline__ uint4 load_chunk(const char* row, int chunk, int head_dim,
                                            bool vector_loads) {
  constexpr int E = chunk_elems<DT>();
  const int first = chunk * E;
  if (vector_loads && first + E <= head_dim)
    return __ldg(reinterpret_cast<const uint4*>(row) + chunk);
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (first + e >= head_dim) break;
    if (DT == kF32)
      w[e] = reinterpret_cast<const uint32_t*>(row)[first + e];
    else
      w[e / 2] |= uint32_t(reinterpret_cast<const uint16_t*>(row)[first + e]) << (16 * (e & 1));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int DT>
__device__ __forceinline__ void unpack(uint4 raw, float* out) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (DT == kF32) {
      out[i] = __uint_as_float(w[i]);
    } else if (DT == kF16) {
      out[2 * i] = f16_to_f32(uint16_t(w[i] & 0xffffu));
      out[2 * i + 1] = f16_to_f32(uint16_t(w[i] >> 16));
    } else {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
}

// The start of a work item: each lane's chunks of its rows' queries (scaled), their
// positions (INT_MIN for rows past the item's), empty accumulators and softmax states.
template <int R, int CPL, int E>
__device__ __forceinline__ void start_item(const AttendParams& p, const WorkItem& item,
                                           const DevAttendJob& job, int sub,
                                           float (&q)[R][CPL][E], int32_t (&q_pos)[R],
                                           float (&acc)[R][CPL][E], RowState (&state)[R]) {
  const int D = p.head_dim, L = p.lanes_per_key;
  const size_t q_elem = kvc_format_row_bytes(job.q_dtype, 1);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int32_t row = item.row_begin + r;
    const bool used = r < item.n_rows;
    q_pos[r] = used ? job.q_pos[row / p.group] : INT_MIN;
    const char* q_row = static_cast<const char*>(job.q) +
                        (int64_t(row / p.group) * job.q_stride + int64_t(row % p.group) * D) * q_elem;
    state[r] = empty_row();
#pragma unroll
    for (int c = 0; c < CPL; ++c)
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = (sub + c * L) * E + e;
        q[r][c][e] = used && d < D ? load_as_f32(q_row, job.q_dtype, size_t(d)) * p.scale : 0.0f;
        acc[r][c][e] = 0.0f;
      }
  }
}

// The end of a work item: the block merges its kWarps * slots partial states of each row
// through shared memory and writes the output rows (or its split-K part). `part` is the lane
// group's index in the block, `sub` the lane's index in its group.
template <int R, int CPL, int E>
__device__ __forceinline__ void finish_item(const AttendParams& p, const WorkItem& item,
                                            const DevAttendJob& job, float (&acc)[R][CPL][E],
                                            const RowState (&state)[R], float* shared, int part,
                                            int sub) {
  const int D = p.head_dim, L = p.lanes_per_key;
  const int P = kWarps * (32 / L);
  float* acc_s = shared;                                          // [R][P][D]
  RowState* state_s = reinterpret_cast<RowState*>(acc_s + R * P * D);  // [R][P]
  float* weight_s = reinterpret_cast<float*>(state_s + R * P);    // [R][P]
  RowState* merged_s = reinterpret_cast<RowState*>(weight_s + R * P);  // [R]
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < CPL; ++c)
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = (sub + c * L) * E + e;
        if (d < D) acc_s[(r * P + part) * D + d] = acc[r][c][e];
      }
    if (sub == 0) state_s[r * P + part] = state[r];
  }
  __syncthreads();
  if (threadIdx.x < R)
    merged_s[threadIdx.x] = merge_rows(state_s + threadIdx.x * P, P, weight_s + threadIdx.x * P);
  __syncthreads();
  for (int idx = threadIdx.x; idx < item.n_rows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float sum = 0.0f;
    for (int i = 0; i < P; ++i) sum = fmaf(weight_s[r * P + i], acc_s[(r * P + i) * D + d], sum);
    if (item.part < 0)
      output_row(job, item.row_begin + r, p.group, D)[d] = sum * output_factor(merged_s[r]);
    else
      p.part_acc[(int64_t(item.part) * p.rows_per_item + r) * D + d] = sum;
  }
  if (threadIdx.x < item.n_rows) {
    if (item.part < 0)
      job.rows[item.row_begin + threadIdx.x] = merged_s[threadIdx.x];
    else
      p.part_rows[int64_t(item.part) * p.rows_per_item + threadIdx.x] = merged_s[threadIdx.x];
  }
}

// CPL: chunks of a row per lane (lanes_per_key * CPL >= n_chunks).
template <int DT, int CPL>
__global__ void __launch_bounds__(kThreads) attend_kernel(AttendParams p) {
  constexpr int E = chunk_elems<DT>();
  constexpr int R = row_cap<CPL>();
  constexpr int U = unroll<CPL>();
  extern __shared__ float shared[];
  const WorkItem item = p.items[blockIdx.x];
  const DevAttendJob& job = p.jobs[item.job];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int L = p.lanes_per_key, slots = 32 / L, slot = lane / L, sub = lane % L;
  const int D = p.head_dim;
  const size_t row_bytes = kvc_format_row_bytes(DT, size_t(D));

  float q[R][CPL][E];
  int32_t q_pos[R];
  float acc[R][CPL][E];
  RowState state[R];
  start_item<R, CPL, E>(p, item, job, sub, q, q_pos, acc, state);

  const int32_t n = item.key_end - item.key_begin;
  const int32_t first = item.key_begin + int32_t(int64_t(n) * warp / kWarps);
  const int32_t end = item.key_begin + int32_t(int64_t(n) * (warp + 1) / kWarps);
  int32_t segment = first < end ? find_range(job.segment_begins, job.n_segments, first) : 0;
  for (int32_t base = first; base < end; base += slots * U) {
    uint4 k[U][CPL], v[U][CPL];
    int32_t key_pos[U];
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t key = base + u * slots + slot;
      valid[u] = key < end;
      key_pos[u] = INT_MAX;
#pragma unroll
      for (int c = 0; c < CPL; ++c) k[u][c] = v[u][c] = make_uint4(0, 0, 0, 0);
      if (!valid[u]) continue;
      while (segment + 1 < job.n_segments && job.segment_begins[segment + 1] <= key) ++segment;
      const DevSegment& s = job.segments[segment];
      const int64_t local = key - job.segment_begins[segment];
      key_pos[u] = s.pos[local];
      const char* k_row = static_cast<const char*>(s.k) + local * row_bytes;
      const char* v_row = static_cast<const char*>(s.v) + local * row_bytes;
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        const int chunk = sub + c * L;
        if (chunk >= p.n_chunks) continue;
        k[u][c] = load_chunk<DT>(k_row, chunk, D, p.vector_loads);
        v[u][c] = load_chunk<DT>(v_row, chunk, D, p.vector_loads);
      }
    }
    float logits[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[CPL][E];
#pragma unroll
      for (int c = 0; c < CPL; ++c) unpack<DT>(k[u][c], kf[c]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int e = 0; e < E; ++e) dot = fmaf(q[r][c][e], kf[c][e], dot);
        for (int offset = L / 2; offset > 0; offset /= 2)
          dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        logits[r][u] =
            final_logit(dot, p.softcap, valid[u] && key_visible(q_pos[r], p.window, key_pos[u]));
      }
    }
    float weights[R][U];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float correction = fold_logits(state[r], logits[r], U, weights[r]);
#pragma unroll
      for (int c = 0; c < CPL; ++c)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][c][e] *= correction;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[CPL][E];
#pragma unroll
      for (int c = 0; c < CPL; ++c) unpack<DT>(v[u][c], vf[c]);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[r][c][e] = fmaf(weights[r][u], vf[c][e], acc[r][c][e]);
    }
  }

  finish_item<R, CPL, E>(p, item, job, acc, state, shared, warp * slots + slot, sub);
}

// The staged path, for rows of at most one 16-byte chunk per lane (cpl 1) that are 16-byte
// aligned, which covers head_dim up to 256 (f16/bf16) or 128 (f32): the block copies
// the K and V rows and positions of staged_keys(L) keys at a time into shared memory with
// asynchronous copies, kStages - 1 stages ahead of the stage its warps compute on, so that many
// keys' loads are in flight per multiprocessor without waiting on the arithmetic. Each lane
// group then takes kStagedUnroll keys of the stage; the rest is as in attend_kernel.
constexpr int kStages = 3;
constexpr int kStagedUnroll = 4;
constexpr int kStageBytes = 2 * kThreads * kStagedUnroll * 16;  // K and V rows of a stage

__host__ __device__ constexpr int staged_keys(int lanes_per_key) {
  return kStageBytes / (2 * 16 * lanes_per_key);
}

size_t staged_shared_bytes(int lanes_per_key) {
  return size_t(kStages) * (kStageBytes + sizeof(int32_t) * size_t(staged_keys(lanes_per_key)));
}

// L: lanes per key (p.lanes_per_key), fixed so that the dot products' lane sums unroll. At
// most 128 registers a thread, so that four blocks (16 warps) share a multiprocessor.
template <int DT, int L>
__global__ void __launch_bounds__(kThreads, 4) attend_staged_kernel(AttendParams p) {
  constexpr int E = chunk_elems<DT>();
  constexpr int R = row_cap<1>();
  constexpr int U = kStagedUnroll;
  extern __shared__ float shared[];
  const WorkItem item = p.items[blockIdx.x];
  const DevAttendJob& job = p.jobs[item.job];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int slots = 32 / L, lane_groups = kWarps * slots;
  constexpr int keys_per_stage = staged_keys(L);
  const int slot = lane / L, sub = lane % L, lane_group = warp * slots + slot;
  const size_t row_bytes = kvc_format_row_bytes(DT, size_t(p.head_dim));
  uint4* rows_s = reinterpret_cast<uint4*>(shared);  // [kStages][K, V][keys_per_stage][L]
  int32_t* pos_s = reinterpret_cast<int32_t*>(rows_s + kStages * kStageBytes / 16);

  float q[R][1][E];
  int32_t q_pos[R];
  float acc[R][1][E];
  RowState state[R];
  start_item<R, 1, E>(p, item, job, sub, q, q_pos, acc, state);

  const int32_t n_keys = item.key_end - item.key_begin;
  const int n_stages = (n_keys + keys_per_stage - 1) / keys_per_stage;
  SegmentCursor cursor(job, item.key_begin);
  const auto issue = [&](int stage) {
    if (stage < n_stages) {
      const int buffer = stage % kStages;
      const int32_t base = item.key_begin + stage * keys_per_stage;
      for (int idx = threadIdx.x; idx < keys_per_stage * L; idx += kThreads) {
        const int at = idx / L, chunk = idx % L;
        const int32_t key = base + at;
        if (key >= item.key_end || chunk >= p.n_chunks) continue;
        const int64_t local = cursor.local(key);
        const DevSegment& segment = cursor.current;
        const size_t from = size_t(local) * row_bytes + size_t(chunk) * 16;
        uint4* k_to = rows_s + (size_t(buffer * 2) * keys_per_stage + at) * L + chunk;
        __pipeline_memcpy_async(k_to, static_cast<const char*>(segment.k) + from, 16);
        __pipeline_memcpy_async(k_to + keys_per_stage * L,
                                static_cast<const char*>(segment.v) + from, 16);
        if (chunk == 0)
          __pipeline_memcpy_async(pos_s + buffer * keys_per_stage + at, segment.pos + local, 4);
      }
    }
    __pipeline_commit();  // an empty group past the last stage keeps the wait counts uniform
  };
  for (int stage = 0; stage < kStages - 1; ++stage) issue(stage);

  for (int stage = 0; stage < n_stages; ++stage) {
    __pipeline_wait_prior(kStages - 2);
    // Every thread's copies of this stage have landed, and every warp is done with the buffer
    // the next issue refills (the one computed on in the previous iteration).
    __syncthreads();
    issue(stage + kStages - 1);
    const int buffer = stage % kStages;
    const uint4* k_s = rows_s + size_t(buffer * 2) * keys_per_stage * L;
    const uint4* v_s = k_s + keys_per_stage * L;
    const int32_t base = item.key_begin + stage * keys_per_stage;
    float logits[R][U];
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int at = u * lane_groups + lane_group;
      valid[u] = base + at < item.key_end;
      const int32_t key_pos = valid[u] ? pos_s[buffer * keys_per_stage + at] : INT_MAX;
      float kf[E];
      if (valid[u] && sub < p.n_chunks) {
        unpack<DT>(k_s[at * L + sub], kf);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) kf[e] = 0.0f;
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) dot = fmaf(q[r][0][e], kf[e], dot);
#pragma unroll
        for (int offset = L / 2; offset > 0; offset /= 2)
          dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        logits[r][u] =
            final_logit(dot, p.softcap, valid[u] && key_visible(q_pos[r], p.window, key_pos));
      }
    }
    float weights[R][U];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float correction = fold_logits(state[r], logits[r], U, weights[r]);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][0][e] *= correction;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!valid[u] || sub >= p.n_chunks) continue;
      float vf[E];
      unpack<DT>(v_s[(u * lane_groups + lane_group) * L + sub], vf);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][0][e] = fmaf(weights[r][u], vf[e], acc[r][0][e]);
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();
  finish_item<R, 1, E>(p, item, job, acc, state, shared, lane_group, sub);
}

// Split-K: one block per SplitRows combines its parts and writes the output rows.
__global__ void __launch_bounds__(kThreads)
    merge_kernel(const DevAttendJob* jobs, const SplitRows* splits, const float* part_acc,
                 const RowState* part_rows, int32_t rows_per_item, int32_t head_dim,
                 int32_t group) {
  extern __shared__ float shared[];
  const SplitRows split = splits[blockIdx.x];
  const DevAttendJob& job = jobs[split.job];
  const int rows = split.n_rows, parts = split.n_parts;
  RowState* state_s = reinterpret_cast<RowState*>(shared);            // [rows][parts]
  float* weight_s = reinterpret_cast<float*>(state_s + rows * parts);  // [rows][parts]
  RowState* merged_s = reinterpret_cast<RowState*>(weight_s + rows * parts);  // [rows]
  for (int idx = threadIdx.x; idx < rows * parts; idx += kThreads) {
    const int r = idx / parts, i = idx % parts;
    state_s[idx] = part_rows[int64_t(split.first_part + i) * rows_per_item + r];
  }
  __syncthreads();
  if (threadIdx.x < rows)
    merged_s[threadIdx.x] =
        merge_rows(state_s + threadIdx.x * parts, parts, weight_s + threadIdx.x * parts);
  __syncthreads();
  for (int idx = threadIdx.x; idx < rows * head_dim; idx += kThreads) {
    const int r = idx / head_dim, d = idx % head_dim;
    float sum = 0.0f;
    for (int i = 0; i < parts; ++i)
      sum = fmaf(weight_s[r * parts + i],
                 part_acc[(int64_t(split.first_part + i) * rows_per_item + r) * head_dim + d], sum);
    output_row(job, split.row_begin + r, group, head_dim)[d] = sum * output_factor(merged_s[r]);
  }
  if (threadIdx.x < rows) job.rows[split.row_begin + threadIdx.x] = merged_s[threadIdx.x];
}

struct StatTile {
  int32_t job;
  int32_t key_begin;
};

struct StatParams {
  const DevAttendJob* jobs;
  const StatTile* tiles;
  int32_t head_dim;
  int32_t group;
  int32_t window;
  int32_t observation_window;
  int32_t storage_dtype;
  float scale;
  float softcap;
};

// One thread per key: its probability under every row that feeds a statistic, from the rows'
// final softmax state.
__global__ void __launch_bounds__(kStatKeys) stats_kernel(StatParams p) {
  const StatTile tile = p.tiles[blockIdx.x];
  const DevAttendJob& job = p.jobs[tile.job];
  const int32_t key = tile.key_begin + int32_t(threadIdx.x);
  if (key >= job.n_keys) return;
  const int32_t segment = find_range(job.segment_begins, job.n_segments, key);
  const DevSegment& s = job.segments[segment];
  const int64_t local = key - job.segment_begins[segment];
  const int32_t key_pos = s.pos[local];
  const char* k_row =
      static_cast<const char*>(s.k) + local * kvc_format_row_bytes(p.storage_dtype, p.head_dim);
  const size_t q_elem = kvc_format_row_bytes(job.q_dtype, 1);
  const int32_t n = job.n_queries;
  const int32_t first_query =
      job.stats.sum ? 0 : job.stats.window ? max(0, n - max(1, p.observation_window)) : n - 1;
  float sum = 0.0f, last = 0.0f, window = 0.0f;
  for (int32_t query = first_query; query < n; ++query) {
    if (!key_visible(job.q_pos[query], p.window, key_pos)) continue;
    const StatTargets targets = stat_targets(query, n, p.observation_window);
    for (int32_t g = 0; g < p.group; ++g) {
      const char* q_row = static_cast<const char*>(job.q) +
                          (int64_t(query) * job.q_stride + int64_t(g) * p.head_dim) * q_elem;
      float dot = 0.0f;
      for (int32_t d = 0; d < p.head_dim; ++d)
        dot = fmaf(load_as_f32(q_row, job.q_dtype, size_t(d)) * p.scale,
                   load_as_f32(k_row, p.storage_dtype, size_t(d)), dot);
      const float probability_of_key =
          probability(job.rows[query * p.group + g], final_logit(dot, p.softcap, true));
      sum += probability_of_key;
      if (targets.last) last += probability_of_key / float(p.group);
      if (targets.window) window += probability_of_key;
    }
  }
  if (job.stats.sum) job.stats.sum[key] += sum;
  if (job.stats.last) job.stats.last[key] = last;
  if (job.stats.window) job.stats.window[key] = window;
}

// Checks the call and gives each job's key count. A job whose table is resident was checked
// segment by segment when it was stored: its count follows from its first and last counts.
std::vector<int32_t> validate(const kvc_attend_job* jobs, const kvc_attend_call& call,
                              const AttendTables& tables) {
  check_storage(call.head_dim, call.storage_dtype, call.v_dtype);
  if (call.group_size <= 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "group_size must be > 0, got %d", call.group_size);
  if (!(call.scale > 0.0f)) fail(KVC_ERR_INVALID_ARGUMENT, "scale must be > 0");
  std::vector<int32_t> keys(call.n_jobs);
  for (size_t j = 0; j < call.n_jobs; ++j) {
    const kvc_attend_job& job = jobs[j];
    if (job.q_dtype != call.storage_dtype && job.q_dtype != KVC_DTYPE_F32)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "attend job %zu: query dtype %d is neither f32 nor the storage dtype", j,
           int(job.q_dtype));
    if (job.n_queries < 0)
      fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: negative n_queries %d", j, job.n_queries);
    check_device(job.q_device, "q", j);
    check_device(job.out_device, "out", j);
    if (job.n_queries > 0 && (!job.q || !job.q_pos || !job.out))
      fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: a NULL pointer", j);
    if (int64_t(job.n_queries) * call.group_size > INT32_MAX)
      fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: too many query rows", j);
    if (tables.resident(j)) {
      keys[j] = tables.resident_keys(job, j);
    } else {
      keys[j] = count_tokens(job.segments, job.n_segments, "attend", j);
      check_segment_formats(job.segments, job.n_segments, call.storage_dtype, call.v_dtype,
                            true, "attend", j);
    }
    if (job.stats.attn_window && call.observation_window < 1)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "attend job %zu: attn_window needs observation_window >= 1, got %d", j,
           call.observation_window);
  }
  return keys;
}

bool has_stats(const kvc_attend_job& job) {
  return job.stats.attn_sum || job.stats.attn_last || job.stats.attn_window;
}

template <int DT, int CPL>
void launch_attend(const AttendParams& params, size_t items, size_t shared_bytes,
                   cudaStream_t stream) {
  attend_kernel<DT, CPL><<<unsigned(items), kThreads, shared_bytes, stream>>>(params);
}

// KVC_CUDA_ATTEND keeps faster kernels out, for A/B runs of the device kit: "generic" (never
// the staged or tensor-core kernels), "staged" (never the tensor-core kernels) or "mma16" (the
// 16-row tensor-core kernel for decode too).
const std::string& attend_choice() {
  static const std::string choice = [] {
    const char* c = std::getenv("KVC_CUDA_ATTEND");
    return std::string(c ? c : "");
  }();
  return choice;
}
bool staged_allowed() { return attend_choice() != "generic"; }
bool mma_allowed() { return attend_choice() != "generic" && attend_choice() != "staged"; }

// The staged kernel where rows are 16-byte aligned and one 16-byte chunk a lane covers them
// with 8 to 32 lanes (head_dim 64 to 256 in f16/bf16, 32 to 128 in f32); true if launched.
template <int DT>
bool try_staged(int cpl, bool vector_loads, const AttendParams& params, size_t items,
                size_t shared_bytes, cudaStream_t stream) {
  if (cpl != 1 || !vector_loads || !staged_allowed()) return false;
  const size_t bytes = std::max(shared_bytes, staged_shared_bytes(params.lanes_per_key));
  const auto launch = [&](void (*kernel)(AttendParams)) {
    launch_blocks(kThreads, kernel, bytes, items, params, stream);
    return true;
  };
  switch (params.lanes_per_key) {
    case 8: return launch(attend_staged_kernel<DT, 8>);
    case 16: return launch(attend_staged_kernel<DT, 16>);
    case 32: return launch(attend_staged_kernel<DT, 32>);
    default: return false;
  }
}

template <int DT>
void launch_attend_dtype(int cpl, bool vector_loads, const AttendParams& params, size_t items,
                         size_t shared_bytes, cudaStream_t stream) {
  if (try_staged<DT>(cpl, vector_loads, params, items, shared_bytes, stream)) return;
  switch (cpl) {
    case 1: return launch_attend<DT, 1>(params, items, shared_bytes, stream);
    case 2: return launch_attend<DT, 2>(params, items, shared_bytes, stream);
    case 4: return launch_attend<DT, 4>(params, items, shared_bytes, stream);
    default: return launch_attend<DT, 8>(params, items, shared_bytes, stream);
  }
}

}  // namespace

void run_attend(Instance& instance, const kvc_attend_job* jobs, const kvc_attend_call& call) {
  const size_t n_jobs = call.n_jobs;
  const cudaStream_t stream = stream_of(call.stream);
  AttendTables tables(instance, jobs, n_jobs, stream);
  const std::vector<int32_t> keys = validate(jobs, call, tables);
  if (n_jobs == 0) return;
  const int32_t D = call.head_dim, G = call.group_size;
  const int dtype = int(call.storage_dtype);
  const int elems = dtype == kF32 ? 4 : 8;
  const int32_t n_chunks = (D + elems - 1) / elems;
  int32_t lanes = 1;
  while (lanes < n_chunks && lanes < 32) lanes *= 2;
  int cpl = 1;
  while (lanes * cpl < n_chunks) cpl *= 2;
  const size_t row_bytes = kvc_format_row_bytes(dtype, size_t(D));

  std::vector<PlanJob> plan_jobs(n_jobs);
  std::vector<char> job_vector_loads(n_jobs, 1);  // its K and V rows 16-byte aligned
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_attend_job& job = jobs[j];
    if (const AttendTables::Table* table = tables.resident(j)) {
      job_vector_loads[j] = table->vector_loads;
    } else {
      for (int32_t s = 0; s < job.n_segments && job_vector_loads[j]; ++s)
        job_vector_loads[j] = reinterpret_cast<uintptr_t>(job.segments[s].k) % 16 == 0 &&
                              reinterpret_cast<uintptr_t>(job.segments[s].v) % 16 == 0;
    }
    plan_jobs[j] = {job.n_queries * G, keys[j]};
  }
  const bool vector_loads =
      row_bytes % 16 == 0 &&
      std::all_of(job_vector_loads.begin(), job_vector_loads.end(), [](char v) { return v != 0; });
  const bool mma = mma_allowed() && mma_applies(dtype, D, vector_loads);
  int32_t max_job_rows = 0;
  for (const PlanJob& job : plan_jobs) max_job_rows = std::max(max_job_rows, job.n_rows);
  if (attend_choice() == "mma16") max_job_rows = kMmaRows;
  const int32_t rows_per_item = mma ? mma_rows(max_job_rows) : cpl == 1 ? 4 : cpl == 2 ? 2 : 1;
  const int64_t blocks_per_multiprocessor =
      mma ? kMmaBlocksPerMultiprocessor : kBlocksPerMultiprocessor;
  const AttendPlan plan = plan_attend(
      plan_jobs, rows_per_item, blocks_per_multiprocessor * int64_t(instance.multiprocessors));
  if (plan.items.empty()) return;

  // Device scratch: each job's row states, host-bound output, and the split-K parts.
  ScratchLayout carve;
  std::vector<size_t> rows_at(n_jobs), out_at(n_jobs);
  for (size_t j = 0; j < n_jobs; ++j) {
    rows_at[j] = carve.take(sizeof(RowState) * size_t(plan_jobs[j].n_rows));
    if (jobs[j].out_device == KVC_DEVICE_HOST)
      out_at[j] = carve.take(sizeof(float) * size_t(plan_jobs[j].n_rows) * size_t(D));
  }
  const size_t part_rows_at = carve.take(sizeof(RowState) * size_t(plan.n_parts) * rows_per_item);
  const size_t part_acc_at =
      carve.take(sizeof(float) * size_t(plan.n_parts) * rows_per_item * size_t(D));
  const DeviceScratch work(instance.scratch, carve.bytes, stream);

  Upload upload;
  const size_t table = upload.add_array<DevAttendJob>(nullptr, n_jobs);
  const size_t items_at = upload.add_array(plan.items.data(), plan.items.size());
  const size_t splits_at = upload.add_array(plan.splits.data(), plan.splits.size());
  std::vector<StatTile> tiles;
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_attend_job& job = jobs[j];
    const size_t at = table + j * sizeof(DevAttendJob);
    const size_t q_elem = kvc_format_row_bytes(job.q_dtype, 1);
    DevAttendJob d{job.q, int64_t(job.q_stride), int32_t(job.q_dtype), job.n_queries, nullptr,
                   job.out, int64_t(job.out_stride), nullptr, nullptr, job.n_segments, keys[j],
                   {job.stats.attn_sum, job.stats.attn_last, job.stats.attn_window},
                   reinterpret_cast<RowState*>(work.data() + rows_at[j])};
    if (job.out_device == KVC_DEVICE_HOST) {
      d.out = reinterpret_cast<float*>(work.data() + out_at[j]);
      d.out_stride = int64_t(G) * D;
    }
    const size_t n = size_t(job.n_queries);
    if (job.q_device == KVC_DEVICE_HOST && n > 0) {
      const size_t width = size_t(G) * size_t(D) * q_elem;
      const size_t q_at = upload.add(nullptr, n * width);
      for (size_t i = 0; i < n; ++i)
        std::memcpy(upload.at<char>(q_at) + i * width,
                    static_cast<const char*>(job.q) + i * job.q_stride * q_elem, width);
      d.q_stride = int64_t(G) * D;
      upload.link(at + offsetof(DevAttendJob, q), q_at);
    }
    upload.link(at + offsetof(DevAttendJob, q_pos), upload.add_array(job.q_pos, n));
    *upload.at<DevAttendJob>(at) = d;
    tables.place(upload, at, job, j, job_vector_loads[j] != 0);
    if (has_stats(job) && n > 0)
      for (int32_t k = 0; k < keys[j]; k += kStatKeys) tiles.push_back({int32_t(j), k});
  }
  const size_t tiles_at = upload.add_array(tiles.data(), tiles.size());
  const DeviceScratch memory(instance.scratch, upload.size(), stream);
  upload.send(instance.pinned, memory);
  tables.fill(memory);
  const auto* dev_jobs = reinterpret_cast<const DevAttendJob*>(memory.data() + table);

  const AttendParams params{dev_jobs,
                            reinterpret_cast<const WorkItem*>(memory.data() + items_at),
                            reinterpret_cast<float*>(work.data() + part_acc_at),
                            reinterpret_cast<RowState*>(work.data() + part_rows_at),
                            D,
                            G,
                            call.sliding_window,
                            lanes,
                            n_chunks,
                            rows_per_item,
                            call.scale,
                            call.softcap,
                            vector_loads ? 1 : 0};
  const size_t parts_per_row = size_t(kWarps) * size_t(32 / lanes);
  const size_t shared_bytes = size_t(rows_per_item) * parts_per_row *
                                  (size_t(D) * sizeof(float) + sizeof(RowState) + sizeof(float)) +
                              size_t(rows_per_item) * sizeof(RowState);
  const size_t n_items = plan.items.size();
  if (mma) {
    launch_attend_mma(params, dtype, n_items, stream);
  } else {
    switch (dtype) {
      case kF32: launch_attend_dtype<kF32>(cpl, vector_loads, params, n_items, shared_bytes, stream); break;
      case kF16: launch_attend_dtype<kF16>(cpl, vector_loads, params, n_items, shared_bytes, stream); break;
      default: launch_attend_dtype<kBF16>(cpl, vector_loads, params, n_items, shared_bytes, stream); break;
    }
  }
  check_cuda(cudaGetLastError(), "launching attend");
  if (!plan.splits.empty()) {
    int32_t max_parts = 0;
    for (const SplitRows& s : plan.splits) max_parts = std::max(max_parts, s.n_parts);
    const size_t merge_bytes =
        size_t(rows_per_item) * (size_t(max_parts) * (sizeof(RowState) + sizeof(float)) + sizeof(RowState));
    merge_kernel<<<unsigned(plan.splits.size()), kThreads, merge_bytes, stream>>>(
        dev_jobs, reinterpret_cast<const SplitRows*>(memory.data() + splits_at),
        params.part_acc, params.part_rows, rows_per_item, D, G);
    check_cuda(cudaGetLastError(), "launching the split-K merge");
  }
  if (!tiles.empty()) {
    const StatParams stat_params{dev_jobs, reinterpret_cast<const StatTile*>(memory.data() + tiles_at),
                                 D, G, call.sliding_window, call.observation_window, dtype,
                                 call.scale, call.softcap};
    stats_kernel<<<unsigned(tiles.size()), kStatKeys, 0, stream>>>(stat_params);
    check_cuda(cudaGetLastError(), "launching the attention statistics");
  }
  // Host-bound outputs: one download of the scratch, then each job's rows to their place.
  size_t first_out = SIZE_MAX, last_out = 0;
  for (size_t j = 0; j < n_jobs; ++j)
    if (jobs[j].out_device == KVC_DEVICE_HOST && plan_jobs[j].n_rows > 0) {
      first_out = std::min(first_out, out_at[j]);
      last_out = std::max(last_out, out_at[j] + sizeof(float) * size_t(plan_jobs[j].n_rows) * D);
    }
  if (first_out == SIZE_MAX) return;
  download(instance.pinned, work.data() + first_out, last_out - first_out, stream,
           [&](const char* host) {
             for (size_t j = 0; j < n_jobs; ++j) {
               if (jobs[j].out_device != KVC_DEVICE_HOST || plan_jobs[j].n_rows == 0) continue;
               const size_t width = size_t(G) * size_t(D);
               const auto* rows = reinterpret_cast<const float*>(host + (out_at[j] - first_out));
               for (int32_t i = 0; i < jobs[j].n_queries; ++i)
                 std::memcpy(jobs[j].out + size_t(i) * jobs[j].out_stride, rows + size_t(i) * width,
                             width * sizeof(float));
             }
           });
}

}  // namespace kvc::cuda
