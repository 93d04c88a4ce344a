// attend on tensor cores for prefill chunks (and any call whose jobs have more than 8 rows),
// f16 and bf16 storage, head_dim 64 to 128 in steps of 16: one thread block per work item of
// up to 16 rows (query token x group head), which share each K/V read. The block copies the K
// and V rows and positions of mma::kStageKeys keys at a time into shared memory with
// asynchronous copies, kStages - 1 stages ahead; each warp takes 16 keys of a stage and runs
// S = Q K^T and O += P V as m16n8k16 products with f32 accumulation, and the online softmax on
// the products' fragments. Q (f32 or the storage dtype) and P enter the products as a pair of
// the storage dtype, the rounded value and its rounding error, so the result keeps about 16 bits
// of mantissa (bf16) or 21 (f16) instead of 8 or 11. The warps' states merge through shared
// memory. Decode-shaped calls go to attend_mma_decode.cu.
#include <algorithm>

#include "attend_mma.hpp"
#include "mma_common.cuh"

namespace kvc::cuda {
namespace {

using namespace mma;

constexpr int kRows = 16;
constexpr int kStages = 3;

struct Layout {
  int q_at;    // Q's pair of tiles, after the stages
  int pos_at;  // positions, after Q
  int bytes;
};

__host__ __device__ constexpr Layout layout_of(int head_dim) {
  const int q_at = kStages * stage_bytes(head_dim);
  const int pos_at = q_at + 2 * kRows * padded_row_bytes(head_dim);
  return {q_at, pos_at, pos_at + kStages * kStageKeys * int(sizeof(int32_t))};
}

// Q's tile into shared memory as the pair [hi, lo] of [kRows][head_dim] (padded rows).
template <int DT, int HD>
__device__ void stage_queries(const AttendParams& p, const WorkItem& item,
                              const DevAttendJob& job, char* q_s, const float* row_scale_s) {
  constexpr int row_bytes = padded_row_bytes(HD);
  for (int idx = threadIdx.x; idx < kRows * HD / 2; idx += kThreads) {
    const int r = idx / (HD / 2), d = 2 * (idx % (HD / 2));
    uint32_t hi, lo;
    split<DT>(scaled_query(p, item, job, r, d, row_scale_s),
              scaled_query(p, item, job, r, d + 1, row_scale_s), hi, lo);
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
  constexpr int row_bytes = padded_row_bytes(HD);
  constexpr Layout layout = layout_of(HD);
  extern __shared__ __align__(16) char shared[];
  const WorkItem item = p.items[blockIdx.x];
  const DevAttendJob& job = p.jobs[item.job];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = 2 * (lane % 4);
  char* q_s = shared + layout.q_at;
  auto* pos_s = reinterpret_cast<int32_t*>(shared + layout.pos_at);
  __shared__ float row_scale_s[kRows];

  row_scales<DT, kRows>(p, item, job, row_scale_s);
  stage_queries<DT, HD>(p, item, job, q_s, row_scale_s);
  // Q's fragments (hi and lo) for every 16-wide slice: the ldmatrix tiles are rows 0-7 and
  // 8-15 of columns 0-7, then of columns 8-15.
  uint32_t q_hi[KS][4], q_lo[KS][4];
  {
    const int r = (lane % 8) + ((lane / 8) % 2) * 8, col = (lane / 16) * 8;
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      ldmatrix_x4(q_hi[s], q_s + r * row_bytes + (s * 16 + col) * 2);
      ldmatrix_x4(q_lo[s], q_s + (kRows + r) * row_bytes + (s * 16 + col) * 2);
    }
  }
  int32_t q_pos[2];
  float row_scale[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    q_pos[h] = query_position(p, item, job, r);
    row_scale[h] = row_scale_s[r];
  }

  float o[NB][4];
#pragma unroll
  for (int b = 0; b < NB; ++b) o[b][0] = o[b][1] = o[b][2] = o[b][3] = 0.0f;
  float row_max[2] = {-__builtin_huge_valf(), -__builtin_huge_valf()};
  float row_sum[2] = {0.0f, 0.0f};  // this lane's columns only, summed over the quad at the end

  StageRing<HD, kStages> ring(job, item, shared, pos_s);
  for (int stage = 0; stage < kStages - 1; ++stage) ring.issue(stage);

  for (int stage = 0; stage < ring.n_stages; ++stage) {
    __pipeline_wait_prior(kStages - 2);
    __syncthreads();
    ring.issue(stage + kStages - 1);
    const char* k_s = ring.keys(stage) + warp * kWarpKeys * row_bytes;
    const char* v_s = ring.values(stage) + warp * kWarpKeys * row_bytes;
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
        ldmatrix_x4(kb, k_s + key * row_bytes + (slice * 16 + col) * 2);
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
    const int32_t* stage_pos = ring.key_positions(stage) + warp * kWarpKeys;
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
    // Online softmax of rows g and g + 8 over the quad's 16 columns (lane bits 0 and 1).
    float weights[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float logits[4] = {s[0][2 * h], s[0][2 * h + 1], s[1][2 * h], s[1][2 * h + 1]};
      const float correction = softmax_step(logits, weights[h], row_max[h], row_sum[h], 3u);
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
        ldmatrix_x4_trans(vb, v_s + key * row_bytes + (b * 8 + col) * 2);
        Pair<DT>::mma(o[b], p_hi, vb[0], vb[1]);
        Pair<DT>::mma(o[b], p_lo, vb[0], vb[1]);
        Pair<DT>::mma(o[b + 1], p_hi, vb[2], vb[3]);
        Pair<DT>::mma(o[b + 1], p_lo, vb[2], vb[3]);
      }
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();

  const MergeSpace<kRows, HD> space(shared);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = g + 8 * h;
    if (lane % 4 == 0) space.states[r * kWarps + warp] = {row_max[h], sum};
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      space.o[(warp * kRows + r) * HD + b * 8 + c] = o[b][2 * h];
      space.o[(warp * kRows + r) * HD + b * 8 + c + 1] = o[b][2 * h + 1];
    }
  }
  __syncthreads();
  finish_warps<kRows, HD>(p, item, job, space);
}

}  // namespace

bool mma_applies(int storage_dtype, int head_dim, bool vector_loads) {
  return vector_loads && (storage_dtype == kF16 || storage_dtype == kBF16) && head_dim >= 64 &&
         head_dim <= 128 && head_dim % 16 == 0;
}

void launch_attend_mma(const AttendParams& params, int storage_dtype, size_t items,
                       cudaStream_t stream) {
  if (params.rows_per_item <= kMmaDecodeRows) {
    launch_attend_mma_decode(params, storage_dtype, items, stream);
    return;
  }
  dispatch(storage_dtype, params.head_dim, [&](auto dt, auto hd) {
    constexpr int DT = decltype(dt)::value, HD = decltype(hd)::value;
    launch_blocks(kThreads, attend_mma_kernel<DT, HD>,
                  std::max(size_t(layout_of(HD).bytes), merge_bytes(kRows, HD)), items, params,
                  stream);
  });
}

}  // namespace kvc::cuda
