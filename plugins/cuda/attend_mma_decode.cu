// attend on tensor cores for decode-shaped calls (every job at most 8 rows: a decode token of
// a GQA group of up to 8 heads), f16 and bf16 storage, head_dim 64 to 128 in steps of 16. The
// keys are the products' 16 rows and the query rows their 8 columns, S^T = K Q^T and
// O^T += V^T P^T, so no product row is spent on padding and a block needs half the registers
// and products of attend_mma.cu's 16-row tiles: three blocks share a multiprocessor, with two
// stages of 64 keys each in shared memory. P^T reaches the second product through movmatrix.
// Numerics as in attend_mma.cu (Q and P as rounded value plus rounding error).
#include <algorithm>

#include "attend_mma.hpp"
#include "mma_common.cuh"

namespace kvc::cuda {
namespace {

using namespace mma;

constexpr int kRows = kMmaDecodeRows;
constexpr int kStages = 2;
// The lane-index bits of the lanes that hold one query row's logits (lane % 4 alike).
constexpr unsigned kRowLanes = 4u | 8u | 16u;

__host__ __device__ constexpr int positions_at(int head_dim) {
  return kStages * stage_bytes(head_dim);
}
__host__ __device__ constexpr int layout_bytes(int head_dim) {
  return positions_at(head_dim) + kStages * kStageKeys * int(sizeof(int32_t));
}

// Fragments follow the m16n8k16 layouts: lane t holds product rows t/4 and t/4 + 8 (keys, or
// head dimensions) of columns 2 (t%4) and 2 (t%4) + 1 (query rows).
template <int DT, int HD>
__global__ void __launch_bounds__(kThreads, 3) attend_mma_decode_kernel(AttendParams p) {
  constexpr int KS = HD / 16;  // 16-wide slices of a row
  constexpr int row_bytes = padded_row_bytes(HD);
  extern __shared__ __align__(16) char shared[];
  const WorkItem item = p.items[blockIdx.x];
  const DevAttendJob& job = p.jobs[item.job];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = 2 * (lane % 4);
  auto* pos_s = reinterpret_cast<int32_t*>(shared + positions_at(HD));
  __shared__ float row_scale_s[kRows];
  row_scales<DT, kRows>(p, item, job, row_scale_s);

  // Q^T as the B operand of each slice: row g's columns c, c+1, then c+8, c+9, as pairs.
  uint32_t q_hi[KS][2], q_lo[KS][2];
#pragma unroll
  for (int s = 0; s < KS; ++s)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int d = s * 16 + half * 8 + c;
      split<DT>(scaled_query(p, item, job, g, d, row_scale_s),
                scaled_query(p, item, job, g, d + 1, row_scale_s), q_hi[s][half], q_lo[s][half]);
    }
  int32_t q_pos[2];
  float row_scale[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    q_pos[j] = query_position(p, item, job, c + j);
    row_scale[j] = row_scale_s[c + j];
  }

  float o[KS][4];  // O^T of slice s: dimensions s*16 + g (0, 1) and + 8 (2, 3), rows c, c + 1
#pragma unroll
  for (int s = 0; s < KS; ++s) o[s][0] = o[s][1] = o[s][2] = o[s][3] = 0.0f;
  float row_max[2] = {-__builtin_huge_valf(), -__builtin_huge_valf()};
  float row_sum[2] = {0.0f, 0.0f};  // this lane's keys only, summed over the row's lanes at the end

  StageRing<HD, kStages> ring(job, item, shared, pos_s);
  ring.issue(0);

  for (int stage = 0; stage < ring.n_stages; ++stage) {
    __pipeline_wait_prior(0);
    // This stage has landed, and every warp is done with the buffer the next one refills.
    __syncthreads();
    ring.issue(stage + 1);
    const char* k_s = ring.keys(stage) + warp * kWarpKeys * row_bytes;
    const char* v_s = ring.values(stage) + warp * kWarpKeys * row_bytes;
    const int32_t first_key = item.key_begin + stage * kStageKeys + warp * kWarpKeys;

    // S^T = K Q^T: keys g (0, 1) and g + 8 (2, 3) of rows c, c + 1. K's tiles: keys 0-7 and
    // 8-15 of columns 0-7, then of columns 8-15.
    float st[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    {
      float st_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const int key = (lane % 8) + ((lane / 8) % 2) * 8, col = (lane / 16) * 8;
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        uint32_t ka[4];
        ldmatrix_x4(ka, k_s + key * row_bytes + (s * 16 + col) * 2);
        Pair<DT>::mma(st, ka, q_hi[s][0], q_hi[s][1]);
        Pair<DT>::mma(st_lo, ka, q_lo[s][0], q_lo[s][1]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) st[i] += st_lo[i];
    }
    const int32_t* stage_pos = ring.key_positions(stage) + warp * kWarpKeys;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int k = g + 8 * half;
      const bool valid = first_key + k < item.key_end;
      const int32_t key_pos = valid ? stage_pos[k] : INT_MAX;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        st[2 * half + j] = final_logit(st[2 * half + j] * row_scale[j], p.softcap,
                                       valid && key_visible(q_pos[j], p.window, key_pos));
    }
    // Online softmax of rows c and c + 1 over the warp's 16 keys.
    float weights[2][2];  // [row][key half]
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float logits[2] = {st[j], st[2 + j]};
      const float correction = softmax_step(logits, weights[j], row_max[j], row_sum[j], kRowLanes);
      if (!__all_sync(0xffffffffu, correction == 1.0f)) {
#pragma unroll
        for (int s = 0; s < KS; ++s) {
          o[s][j] *= correction;
          o[s][2 + j] *= correction;
        }
      }
    }
    // P^T as the B operand: the pairs (rows c, c + 1) of keys g and g + 8, transposed into
    // (keys c, c + 1 and c + 8, c + 9) of row g.
    uint32_t p_hi[2], p_lo[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t hi, lo;
      split<DT>(weights[0][half], weights[1][half], hi, lo);
      p_hi[half] = transposed(hi);
      p_lo[half] = transposed(lo);
    }
    // O^T += V^T P^T: V's tiles transposed, keys 0-7 of columns 0-7 and 8-15, then keys 8-15.
    {
      const int key = (lane % 8) + (lane / 16) * 8, col = ((lane / 8) % 2) * 8;
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        uint32_t va[4];
        ldmatrix_x4_trans(va, v_s + key * row_bytes + (s * 16 + col) * 2);
        Pair<DT>::mma(o[s], va, p_hi[0], p_hi[1]);
        Pair<DT>::mma(o[s], va, p_lo[0], p_lo[1]);
      }
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();

  const MergeSpace<kRows, HD> space(shared);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float sum = row_sum[j];
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    sum += __shfl_xor_sync(0xffffffffu, sum, 8);
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    const int r = c + j;
    if (g == 0) space.states[r * kWarps + warp] = {row_max[j], sum};
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      space.o[(warp * kRows + r) * HD + s * 16 + g] = o[s][j];
      space.o[(warp * kRows + r) * HD + s * 16 + g + 8] = o[s][2 + j];
    }
  }
  __syncthreads();
  finish_warps<kRows, HD>(p, item, job, space);
}

}  // namespace

void launch_attend_mma_decode(const AttendParams& params, int storage_dtype, size_t items,
                              cudaStream_t stream) {
  dispatch(storage_dtype, params.head_dim, [&](auto dt, auto hd) {
    constexpr int DT = decltype(dt)::value, HD = decltype(hd)::value;
    launch_blocks(kThreads, attend_mma_decode_kernel<DT, HD>,
                  std::max(size_t(layout_bytes(HD)), merge_bytes(kRows, HD)), items, params,
                  stream);
  });
}

}  // namespace kvc::cuda
