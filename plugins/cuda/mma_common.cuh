// What the tensor-core attention kernels share (attend_mma.cu: 16 rows a tile, for prefill;
// attend_mma_decode.cu: 8 rows a tile with the keys as the products' rows, for decode): the
// m16n8k16 product and fragment loads of f16 and bf16, the split of a float into the storage
// dtype's rounded value and rounding error, the rows' f16 range scales, the stage copy into
// shared memory and the merge of the warps' states.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "attend_kernels.cuh"

namespace kvc::cuda::mma {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpKeys = 16;                   // keys a warp takes of each stage
constexpr int kStageKeys = kWarps * kWarpKeys;  // keys a stage holds
// f16 Q elements past this (after the scale) would overflow in the pair: such a row is
// scaled down by a power of two before rounding and its logits scaled back up.
constexpr float kF16Limit = 16384.0f;

// Shared memory rows are padded by 16 bytes, so the eight rows of an ldmatrix tile fall in
// different banks.
__host__ __device__ constexpr int padded_row_bytes(int head_dim) { return head_dim * 2 + 16; }
// K and V rows of one stage.
__host__ __device__ constexpr int stage_bytes(int head_dim) {
  return 2 * kStageKeys * padded_row_bytes(head_dim);
}

template <int DT>
struct Pair;
template <>
struct Pair<kF16> {
  // Two floats as the storage dtype's pair of halves (the lower column in the low half).
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct Pair<kBF16> {
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* shared_row) {
  const unsigned address = unsigned(__cvta_generic_to_shared(shared_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* shared_row) {
  const unsigned address = unsigned(__cvta_generic_to_shared(shared_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The transpose of the 8x8 b16 matrix whose fragment (lane t: row t/4, columns 2 (t%4) and
// 2 (t%4) + 1) the warp holds in x.
__device__ __forceinline__ uint32_t transposed(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// A float pair as the storage dtype: the rounded values, and their rounding errors rounded.
template <int DT>
__device__ __forceinline__ void split(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = Pair<DT>::pack(a, b);
  const float2 rounded = Pair<DT>::unpack(hi);
  lo = Pair<DT>::pack(a - rounded.x, b - rounded.y);
}

__device__ __forceinline__ const char* query_row(const AttendParams& p, const WorkItem& item,
                                                 const DevAttendJob& job, int r) {
  const int32_t row = item.row_begin + r;
  return static_cast<const char*>(job.q) +
         (int64_t(row / p.group) * job.q_stride + int64_t(row % p.group) * p.head_dim) *
             int64_t(kvc_format_row_bytes(job.q_dtype, 1));
}

// Each of the item's first ROWS rows' power-of-two divisor (1 but for f16 rows whose scaled
// values pass kF16Limit) into row_scale_s; every thread of the block calls it.
template <int DT, int ROWS>
__device__ void row_scales(const AttendParams& p, const WorkItem& item, const DevAttendJob& job,
                           float* row_scale_s) {
  if (threadIdx.x < ROWS) {
    const int r = threadIdx.x;
    float largest = 0.0f;
    if (r < item.n_rows && DT == kF16) {
      const char* q_row = query_row(p, item, job, r);
      for (int d = 0; d < p.head_dim; ++d)
        largest = fmaxf(largest, fabsf(load_as_f32(q_row, job.q_dtype, size_t(d)) * p.scale));
    }
    float scale = 1.0f;
    while (largest / scale > kF16Limit) scale *= 2.0f;
    row_scale_s[r] = scale;
  }
  __syncthreads();
}

// Element d of row r of the item's scaled queries, divided by the row's scale; 0 past n_rows.
__device__ __forceinline__ float scaled_query(const AttendParams& p, const WorkItem& item,
                                              const DevAttendJob& job, int r, int d,
                                              const float* row_scale_s) {
  if (r >= item.n_rows) return 0.0f;
  return load_as_f32(query_row(p, item, job, r), job.q_dtype, size_t(d)) * p.scale /
         row_scale_s[r];
}

// The row's query position, INT_MIN past n_rows (it sees no key).
__device__ __forceinline__ int32_t query_position(const AttendParams& p, const WorkItem& item,
                                                  const DevAttendJob& job, int r) {
  return r < item.n_rows ? job.q_pos[(item.row_begin + r) / p.group] : INT_MIN;
}

// Starts the asynchronous copy of a stage's K and V rows ([kStageKeys] padded rows each) and
// positions into shared memory; keys past the item's end get zero rows, so that the masked
// products stay finite. Every thread of the block calls it, then commits.
template <int HD>
__device__ __forceinline__ void copy_stage(SegmentCursor& cursor, const WorkItem& item,
                                           int32_t base, char* k_s, char* v_s, int32_t* pos_s) {
  constexpr int chunks = HD * 2 / 16;
  constexpr int row_bytes = padded_row_bytes(HD);
  for (int idx = threadIdx.x; idx < kStageKeys * chunks; idx += kThreads) {
    const int at = idx / chunks, chunk = idx % chunks;
    const int32_t key = base + at;
    char* k_to = k_s + at * row_bytes + chunk * 16;
    char* v_to = v_s + at * row_bytes + chunk * 16;
    if (key >= item.key_end) {
      *reinterpret_cast<uint4*>(k_to) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(v_to) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const int64_t local = cursor.local(key);
    const DevSegment& segment = cursor.current;
    const size_t from = size_t(local) * HD * 2 + size_t(chunk) * 16;
    __pipeline_memcpy_async(k_to, static_cast<const char*>(segment.k) + from, 16);
    __pipeline_memcpy_async(v_to, static_cast<const char*>(segment.v) + from, 16);
    if (chunk == 0) __pipeline_memcpy_async(pos_s + at, segment.pos + local, 4);
  }
}

// The block's copies of its item's keys into STAGES buffers of shared memory, kStageKeys keys a
// stage: stage s lands in buffer s % STAGES (K rows, then V rows: stage_bytes) with its positions
// in positions + (s % STAGES) * kStageKeys.
template <int HD, int STAGES>
struct StageRing {
  const WorkItem& item;
  char* buffers;
  int32_t* positions;
  SegmentCursor cursor;
  int n_stages;

  __device__ StageRing(const DevAttendJob& job, const WorkItem& it, char* b, int32_t* pos)
      : item(it), buffers(b), positions(pos), cursor(job, it.key_begin),
        n_stages((it.key_end - it.key_begin + kStageKeys - 1) / kStageKeys) {}
  __device__ char* keys(int stage) const { return buffers + (stage % STAGES) * stage_bytes(HD); }
  __device__ const char* values(int stage) const {
    return keys(stage) + kStageKeys * padded_row_bytes(HD);
  }
  __device__ int32_t* key_positions(int stage) const {
    return positions + (stage % STAGES) * kStageKeys;
  }
  // Starts the copy of a stage (nothing past the last one) and commits it as one group, so that
  // __pipeline_wait_prior(STAGES - 2) after issuing stage s + STAGES - 1 means stage s landed.
  __device__ void issue(int stage) {
    if (stage < n_stages)
      copy_stage<HD>(cursor, item, item.key_begin + stage * kStageKeys, keys(stage),
                     keys(stage) + kStageKeys * padded_row_bytes(HD), key_positions(stage));
    __pipeline_commit();
  }
};

// Shared memory of the warps' merge: each warp's O rows, states and the merge weights.
__host__ __device__ constexpr size_t merge_bytes(int rows, int head_dim) {
  return size_t(kWarps) * rows * size_t(head_dim) * sizeof(float) +
         size_t(kWarps) * rows * (sizeof(RowState) + sizeof(float)) + rows * sizeof(RowState);
}

// Where each warp leaves its O rows ([kWarps][ROWS][HD], unnormalised) and row states
// ([ROWS][kWarps]) for finish_warps.
template <int ROWS, int HD>
struct MergeSpace {
  float* o;
  RowState* states;
  float* weights;
  RowState* merged;
  __device__ explicit MergeSpace(char* shared)
      : o(reinterpret_cast<float*>(shared)),
        states(reinterpret_cast<RowState*>(o + kWarps * ROWS * HD)),
        weights(reinterpret_cast<float*>(states + ROWS * kWarps)),
        merged(reinterpret_cast<RowState*>(weights + ROWS * kWarps)) {}
};

// After every warp filled its part of `space` (and a barrier): merges the warps' states of each
// row and writes the output rows, or the split-K part.
template <int ROWS, int HD>
__device__ void finish_warps(const AttendParams& p, const WorkItem& item, const DevAttendJob& job,
                             const MergeSpace<ROWS, HD>& space) {
  if (threadIdx.x < ROWS)
    space.merged[threadIdx.x] = merge_rows(space.states + threadIdx.x * kWarps, kWarps,
                                           space.weights + threadIdx.x * kWarps);
  __syncthreads();
  for (int idx = threadIdx.x; idx < item.n_rows * HD; idx += kThreads) {
    const int r = idx / HD, d = idx % HD;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      sum = fmaf(space.weights[r * kWarps + w], space.o[(w * ROWS + r) * HD + d], sum);
    if (item.part < 0)
      output_row(job, item.row_begin + r, p.group, HD)[d] = sum * output_factor(space.merged[r]);
    else
      p.part_acc[(int64_t(item.part) * p.rows_per_item + r) * HD + d] = sum;
  }
  if (threadIdx.x < item.n_rows) {
    if (item.part < 0)
      job.rows[item.row_begin + threadIdx.x] = space.merged[threadIdx.x];
    else
      p.part_rows[int64_t(item.part) * p.rows_per_item + threadIdx.x] = space.merged[threadIdx.x];
  }
}

// The online softmax step of one row over a tile: folds the logits this lane holds (n of them)
// into the row's running maximum (shared by the lanes that hold the row: their maxima are
// combined over the lane-index bits in `lane_mask_bits`) and this lane's partial sum; writes the
// weights and returns the factor the row's accumulator must be multiplied by.
template <int N>
__device__ __forceinline__ float softmax_step(const float (&logits)[N], float (&weights)[N],
                                              float& row_max, float& row_sum,
                                              unsigned lane_mask_bits) {
  float tile_max = logits[0];
#pragma unroll
  for (int i = 1; i < N; ++i) tile_max = fmaxf(tile_max, logits[i]);
  for (unsigned bit = 1; bit < 32; bit <<= 1)
    if (lane_mask_bits & bit) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, bit));
  const float new_max = fmaxf(row_max, tile_max);
  const bool empty = new_max == -__builtin_huge_valf();
  const float correction = empty || row_max == -__builtin_huge_valf()
                               ? (empty ? 1.0f : 0.0f)
                               : fold_exp(row_max - new_max);
  row_max = new_max;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    weights[i] = empty || logits[i] == -__builtin_huge_valf() ? 0.0f
                                                              : fold_exp(logits[i] - new_max);
    sum += weights[i];
  }
  row_sum = row_sum * correction + sum;
  return correction;
}

// Calls launch(DT, HD) with the call's storage dtype (f16 or bf16) and head_dim (64 to 128 in
// steps of 16) as std::integral_constant values, for a kernel template to be instantiated.
template <class Launch>
void dispatch(int storage_dtype, int head_dim, Launch&& launch) {
  const auto with_head_dim = [&](auto dt) {
    switch (head_dim) {
      case 64: return launch(dt, std::integral_constant<int, 64>{});
      case 80: return launch(dt, std::integral_constant<int, 80>{});
      case 96: return launch(dt, std::integral_constant<int, 96>{});
      case 112: return launch(dt, std::integral_constant<int, 112>{});
      default: return launch(dt, std::integral_constant<int, 128>{});
    }
  };
  if (storage_dtype == kF16)
    with_head_dim(std::integral_constant<int, kF16>{});
  else
    with_head_dim(std::integral_constant<int, kBF16>{});
}


}  // namespace kvc::cuda::mma
