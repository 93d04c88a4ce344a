// attend on tensor cores, for f16 and bf16 storage with head_dim a multiple of 16 up to 128:
// one thread block per work item of up to 16 rows (query token x group head), so a GQA group
// of a decode step, or 16 rows of a prefill chunk, share each K/V read. The block copies the
// K and V rows and positions of kStageKeys keys at a time into shared memory with
// asynchronous copies, kStages - 1 stages ahead; each warp takes 16 keys of a stage and runs
// S = Q K^T and O += P V as m16n8k16 matrix products with f32 accumulation, and the online
// softmax on the products' fragments. Q (f32 or the storage dtype) and P enter the products as
// a pair of the storage dtype, the rounded value and its rounding error, so the result keeps
// about 16 bits of mantissa (bf16) or 21 (f16) instead of 8 or 11. The warps' states merge
// through shared memory as in the CUDA-core kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <climits>

#include "attend_mma.hpp"
#include "cuda_check.hpp"

namespace kvc::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kMmaRows;
constexpr int kWarpKeys = 16;
constexpr int kStageKeys = kWarps * kWarpKeys;
constexpr int kStages = 3;
// f16 Q elements past this (after the scale) would overflow in the pair: such a row is
// scaled down by a power of two before rounding and its products scaled back up.
constexpr float kF16Limit = 16384.0f;

// Shared memory rows are padded by 16 bytes, so the eight rows of an ldmatrix tile fall in
// different banks.
__host__ __device__ constexpr int padded_row_bytes(int head_dim) { return head_dim * 2 + 16; }

struct MmaLayout {
  int row_bytes;    // padded
  int stage_bytes;  // K and V rows of a stage
  int q_at;         // Q's pair of tiles, after the stages
  int pos_at;       // positions, after Q
  int bytes;
};

__host__ __device__ MmaLayout mma_layout(int head_dim) {
  MmaLayout l{};
  l.row_bytes = padded_row_bytes(head_dim);
  l.stage_bytes = 2 * kStageKeys * l.row_bytes;
  l.q_at = kStages * l.stage_bytes;
  l.pos_at = l.q_at + 2 * kRows * l.row_bytes;
  l.bytes = l.pos_at + kStages * kStageKeys * int(sizeof(int32_t));
  return l;
}

// The epilogue's shared memory: each warp's O tile, states and the merge weights.
size_t mma_merge_bytes(int head_dim) {
  return size_t(kWarps) * kRows * size_t(head_dim) * sizeof(float) +
         size_t(kWarps) * kRows * (sizeof(RowState) + sizeof(float)) + kRows * sizeof(RowState);
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

// A float's pair: its value rounded to the storage dtype and the rounding error, rounded.
template <int DT>
__device__ __forceinline__ void split(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = Pair<DT>::pack(a, b);
  const float2 rounded = Pair<DT>::unpack(hi);
  lo = Pair<DT>::pack(a - rounded.x, b - rounded.y);
}

// Q's tile into shared memory as the pair [hi, lo] of [kRows][head_dim] (padded rows): row r
// scaled by p.scale and, in f16, by 1 / row_scale[r].
template <int DT>
__device__ void stage_queries(const AttendParams& p, const WorkItem& item,
                              const DevAttendJob& job, char* q_s, int row_bytes,
                              float* row_scale_s) {
  const int D = p.head_dim;
  const size_t q_elem = dtype_bytes(job.q_dtype);
  if (threadIdx.x < kRows) {
    const int r = threadIdx.x;
    float largest = 0.0f;
    if (r < item.n_rows && DT == kF16) {
      const int32_t row = item.row_begin + r;
      const char* q_row = static_cast<const char*>(job.q) +
                          (int64_t(row / p.group) * job.q_stride + int64_t(row % p.group) * D) *
                              q_elem;
      for (int d = 0; d < D; ++d)
        largest = fmaxf(largest, fabsf(load_as_f32(q_row, job.q_dtype, size_t(d)) * p.scale));
    }
    float scale = 1.0f;
    while (largest / scale > kF16Limit) scale *= 2.0f;
    row_scale_s[r] = scale;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kRows * D / 2; idx += kThreads) {
    const int r = idx / (D / 2), d = 2 * (idx % (D / 2));
    float a = 0.0f, b = 0.0f;
    if (r < item.n_rows) {
      const int32_t row = item.row_begin + r;
      const char* q_row = static_cast<const char*>(job.q) +
                          (int64_t(row / p.group) * job.q_stride + int64_t(row % p.group) * D) *
                              q_elem;
      const float factor = p.scale / row_scale_s[r];
      a = load_as_f32(q_row, job.q_dtype, size_t(d)) * factor;
      b = load_as_f32(q_row, job.q_dtype, size_t(d + 1)) * factor;
    }
    uint32_t hi, lo;
    split<DT>(a, b, hi, lo);
    *reinterpret_cast<uint32_t*>(q_s + r * row_bytes + d * 2) = hi;
    *reinterpret_cast<uint32_t*>(q_s + (kRows + r) * row_bytes + d * 2) = lo;
  }
  __syncthreads();
}

// HD: head_dim. Fragments follow the m16n8k16 layouts: lane t holds rows t/4 and t/4 + 8,
// columns 2 (t%4) and 2 (t%4) + 1 of each 8-column block.
template <int DT, int HD>
__global__ void __launch_bounds__(kThreads, 2) attend_mma_kernel(AttendParams p) {
  constexpr int KS = HD / 16;  // 16-wide slices of a row
  constexpr int NB = HD / 8;   // 8-wide blocks of the output
  extern __shared__ __align__(16) char shared[];
  const MmaLayout layout = mma_layout(HD);
  const WorkItem item = p.items[blockIdx.x];
  const DevAttendJob& job = p.jobs[item.job];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = 2 * (lane % 4);
  char* q_s = shared + layout.q_at;
  auto* pos_s = reinterpret_cast<int32_t*>(shared + layout.pos_at);
  __shared__ float row_scale_s[kRows];

  stage_queries<DT>(p, item, job, q_s, layout.row_bytes, row_scale_s);
  // Q's fragments (hi and lo) for every 16-wide slice: the ldmatrix tiles are rows 0-7 and
  // 8-15 of columns 0-7, then of columns 8-15.
  uint32_t q_hi[KS][4], q_lo[KS][4];
  {
    const int r = (lane % 8) + ((lane / 8) % 2) * 8, col = (lane / 16) * 8;
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      ldmatrix_x4(q_hi[s], q_s + r * layout.row_bytes + (s * 16 + col) * 2);
      ldmatrix_x4(q_lo[s], q_s + (kRows + r) * layout.row_bytes + (s * 16 + col) * 2);
    }
  }
  int32_t q_pos[2];
  float row_scale[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    q_pos[h] = r < item.n_rows ? job.q_pos[(item.row_begin + r) / p.group] : INT_MIN;
    row_scale[h] = row_scale_s[r];
  }

  float o[NB][4];
#pragma unroll
  for (int b = 0; b < NB; ++b) o[b][0] = o[b][1] = o[b][2] = o[b][3] = 0.0f;
  float row_max[2] = {-__builtin_huge_valf(), -__builtin_huge_valf()};
  float row_sum[2] = {0.0f, 0.0f};  // this lane's columns only, summed over the quad at the end

  const int32_t n_keys = item.key_end - item.key_begin;
  const int n_stages = (n_keys + kStageKeys - 1) / kStageKeys;
  constexpr int chunks = HD * 2 / 16;  // 16-byte chunks of a row
  SegmentCursor cursor(job, item.key_begin);
  const auto issue = [&](int stage) {
    if (stage < n_stages) {
      char* k_s = shared + (stage % kStages) * layout.stage_bytes;
      char* v_s = k_s + kStageKeys * layout.row_bytes;
      const int32_t base = item.key_begin + stage * kStageKeys;
      for (int idx = threadIdx.x; idx < kStageKeys * chunks; idx += kThreads) {
        const int at = idx / chunks, chunk = idx % chunks;
        const int32_t key = base + at;
        char* k_to = k_s + at * layout.row_bytes + chunk * 16;
        char* v_to = v_s + at * layout.row_bytes + chunk * 16;
        if (key >= item.key_end) {  // zeros, so that masked products stay finite
          *reinterpret_cast<uint4*>(k_to) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(v_to) = make_uint4(0, 0, 0, 0);
          continue;
        }
        const int64_t local = cursor.local(key);
        const DevSegment& segment = cursor.current;
        const size_t from = size_t(local) * HD * 2 + size_t(chunk) * 16;
        __pipeline_memcpy_async(k_to, static_cast<const char*>(segment.k) + from, 16);
        __pipeline_memcpy_async(v_to, static_cast<const char*>(segment.v) + from, 16);
        if (chunk == 0)
          __pipeline_memcpy_async(pos_s + (stage % kStages) * kStageKeys + at, segment.pos + local,
                                  4);
      }
    }
    __pipeline_commit();
  };
  for (int stage = 0; stage < kStages - 1; ++stage) issue(stage);

  for (int stage = 0; stage < n_stages; ++stage) {
    __pipeline_wait_prior(kStages - 2);
    __syncthreads();
    issue(stage + kStages - 1);
    const int buffer = stage % kStages;
    const char* k_s = shared + buffer * layout.stage_bytes + warp * kWarpKeys * layout.row_bytes;
    const char* v_s = k_s + kStageKeys * layout.row_bytes;
    const int32_t first_key = item.key_begin + stage * kStageKeys + warp * kWarpKeys;

    // S = Q K^T for this warp's 16 keys: two 8-key blocks. The K tiles: keys 0-7 of columns
    // 0-7 and 8-15, then keys 8-15.
    // The hi and lo products accumulate apart: four independent chains of products.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    {
      float s_lo[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      const int key = (lane % 8) + (lane / 16) * 8, col = ((lane / 8) % 2) * 8;
#pragma unroll
      for (int slice = 0; slice < KS; ++slice) {
        uint32_t kb[4];
        ldmatrix_x4(kb, k_s + key * layout.row_bytes + (slice * 16 + col) * 2);
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          Pair<DT>::mma(s[n], q_hi[slice], kb[2 * n], kb[2 * n + 1]);
          Pair<DT>::mma(s_lo[n], q_lo[slice], kb[2 * n], kb[2 * n + 1]);
        }
      }
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[n][i] += s_lo[n][i];
    }
    // Logits, masked by position, window and the item's end.
    const int32_t* stage_pos = pos_s + buffer * kStageKeys + warp * kWarpKeys;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int k = n * 8 + c + j;
        const bool valid = first_key + k < item.key_end;
        const int32_t key_pos = valid ? stage_pos[k] : INT_MAX;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          s[n][2 * h + j] = final_logit(s[n][2 * h + j] * row_scale[h], p.softcap,
                                        valid && key_visible(q_pos[h], p.window, key_pos));
      }
    // Online softmax of rows g and g + 8 over the quad's 16 columns.
    float weights[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max =
          fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(row_max[h], tile_max);
      const bool empty = new_max == -__builtin_huge_valf();
      const float correction =
          empty || row_max[h] == -__builtin_huge_valf() ? (empty ? 1.0f : 0.0f)
                                                        : fold_exp(row_max[h] - new_max);
      row_max[h] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float logit = s[n][2 * h + j];
          const float w = empty || logit == -__builtin_huge_valf() ? 0.0f
                                                                   : fold_exp(logit - new_max);
          weights[h][2 * n + j] = w;
          sum += w;
        }
      row_sum[h] = row_sum[h] * correction + sum;
      // Once a row's maximum settles the correction is 1 for the whole warp, most tiles.
      if (!__all_sync(0xffffffffu, correction == 1.0f)) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
          o[b][2 * h] *= correction;
          o[b][2 * h + 1] *= correction;
        }
      }
    }
    // P as the A operand of P V (keys are its 16 columns), in pairs.
    uint32_t p_hi[4], p_lo[4];
    split<DT>(weights[0][0], weights[0][1], p_hi[0], p_lo[0]);  // row g, keys c, c+1
    split<DT>(weights[1][0], weights[1][1], p_hi[1], p_lo[1]);  // row g+8
    split<DT>(weights[0][2], weights[0][3], p_hi[2], p_lo[2]);  // row g, keys 8+c, 9+c
    split<DT>(weights[1][2], weights[1][3], p_hi[3], p_lo[3]);  // row g+8
    // O += P V: V's tiles transposed, keys 0-7 and 8-15 of columns 0-7, then of 8-15.
    {
      const int key = (lane % 8) + ((lane / 8) % 2) * 8, col = (lane / 16) * 8;
#pragma unroll
      for (int b = 0; b < NB; b += 2) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_s + key * layout.row_bytes + (b * 8 + col) * 2);
        Pair<DT>::mma(o[b], p_hi, vb[0], vb[1]);
        Pair<DT>::mma(o[b], p_lo, vb[0], vb[1]);
        Pair<DT>::mma(o[b + 1], p_hi, vb[2], vb[3]);
        Pair<DT>::mma(o[b + 1], p_lo, vb[2], vb[3]);
      }
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();

  // Merge the warps' states of each row, then write the output rows or the split-K part.
  float* o_s = reinterpret_cast<float*>(shared);                         // [kWarps][kRows][HD]
  auto* state_s = reinterpret_cast<RowState*>(o_s + kWarps * kRows * HD);  // [kRows][kWarps]
  auto* weight_s = reinterpret_cast<float*>(state_s + kRows * kWarps);    // [kRows][kWarps]
  auto* merged_s = reinterpret_cast<RowState*>(weight_s + kRows * kWarps);  // [kRows]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = g + 8 * h;
    if (lane % 4 == 0) state_s[r * kWarps + warp] = {row_max[h], sum};
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      o_s[(warp * kRows + r) * HD + b * 8 + c] = o[b][2 * h];
      o_s[(warp * kRows + r) * HD + b * 8 + c + 1] = o[b][2 * h + 1];
    }
  }
  __syncthreads();
  if (threadIdx.x < kRows)
    merged_s[threadIdx.x] =
        merge_rows(state_s + threadIdx.x * kWarps, kWarps, weight_s + threadIdx.x * kWarps);
  __syncthreads();
  for (int idx = threadIdx.x; idx < item.n_rows * HD; idx += kThreads) {
    const int r = idx / HD, d = idx % HD;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      sum = fmaf(weight_s[r * kWarps + w], o_s[(w * kRows + r) * HD + d], sum);
    if (item.part < 0)
      output_row(job, item.row_begin + r, p.group, HD)[d] = sum * output_factor(merged_s[r]);
    else
      p.part_acc[(int64_t(item.part) * p.rows_per_item + r) * HD + d] = sum;
  }
  if (threadIdx.x < item.n_rows) {
    if (item.part < 0)
      job.rows[item.row_begin + threadIdx.x] = merged_s[threadIdx.x];
    else
      p.part_rows[int64_t(item.part) * p.rows_per_item + threadIdx.x] = merged_s[threadIdx.x];
  }
}

template <int DT, int HD>
void launch(const AttendParams& params, size_t items, cudaStream_t stream) {
  const size_t bytes =
      std::max(size_t(mma_layout(HD).bytes), mma_merge_bytes(HD));
  check_cuda(cudaFuncSetAttribute(attend_mma_kernel<DT, HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
             "raising the tensor-core attention's shared memory");
  attend_mma_kernel<DT, HD><<<unsigned(items), kThreads, bytes, stream>>>(params);
}

template <int DT>
void launch_dtype(const AttendParams& params, size_t items, cudaStream_t stream) {
  switch (params.head_dim) {
    case 64: return launch<DT, 64>(params, items, stream);
    case 80: return launch<DT, 80>(params, items, stream);
    case 96: return launch<DT, 96>(params, items, stream);
    case 112: return launch<DT, 112>(params, items, stream);
    default: return launch<DT, 128>(params, items, stream);
  }
}

}  // namespace

bool mma_applies(int storage_dtype, int head_dim, bool vector_loads) {
  return vector_loads && (storage_dtype == kF16 || storage_dtype == kBF16) && head_dim >= 64 &&
         head_dim <= 128 && head_dim % 16 == 0;
}

void launch_attend_mma(const AttendParams& params, int storage_dtype, size_t items,
                       cudaStream_t stream) {
  if (storage_dtype == kF16)
    launch_dtype<kF16>(params, items, stream);
  else
    launch_dtype<kBF16>(params, items, stream);
}

}  // namespace kvc::cuda
