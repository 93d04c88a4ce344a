// The inner loops of attention over one tile of keys, chosen once for the running CPU: an
// AVX2/FMA/F16C set where the CPU has them, else the portable set, which GCC auto-vectorises
// for plain x86-64. Rows of f32 are `dim` apart: the head dimension rounded up to kDimAlign,
// zero-padded.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

constexpr size_t kDimAlign = 8;  // f32 lanes of an AVX register
// The stride of f32 rows for a head dimension.
constexpr size_t padded_dim(size_t head_dim) {
  return (head_dim + kDimAlign - 1) / kDimAlign * kDimAlign;
}
// Keys scored together: a tile's K and V rows stay in L1/L2 while every query row of a block
// passes over them. Rows of logits and weights are this long.
constexpr size_t kTileKeys = 32;

// Bytes [begin, begin + bytes).
struct ByteRange {
  const char* begin;
  size_t bytes;
};

// Memory a kernel asks for while it computes: the next tile's K rows during the logits, its V
// rows during the accumulate. The kernel spreads the requests over its steps, a few lines at a
// time: a burst of a whole tile's lines before the kernel filled the core's miss buffers, and
// the arithmetic waited behind them (docs/performance.md). The lines go to the outer caches
// (locality 1, prefetcht2 on x86), which leaves the first level's miss buffers to the
// kernel's own loads.
class Prefetch {
 public:
  Prefetch() = default;
  // The lines of ranges[0, n); `ranges` must outlive the requests.
  Prefetch(const ByteRange* ranges, size_t n) : ranges_(ranges), n_ranges_(n) {
    if (n_ranges_ > 0) start_range();
  }
  // The remaining lines go out over `steps` calls of step().
  void spread_over(size_t steps) {
    size_t lines = size_t(end_ - next_ + kLine - 1) / kLine;
    for (size_t r = range_ + 1; r < n_ranges_; ++r)
      lines += (ranges_[r].bytes + kLine - 1) / kLine;
    per_step_ = steps == 0 ? lines : (lines + steps - 1) / steps;
  }
  void step() {
    for (size_t i = 0; i < per_step_; ++i) {
      if (__builtin_expect(next_ >= end_, 0) && !next_range()) return;
      __builtin_prefetch(next_, 0, kLocality);
      next_ += kLine;
    }
  }
  void rest() {
    for (;;) {
      for (; next_ < end_; next_ += kLine) __builtin_prefetch(next_, 0, kLocality);
      if (!next_range()) return;
    }
  }
  bool done() const { return next_ >= end_ && range_ + 1 >= n_ranges_; }

 private:
  static constexpr size_t kLine = 64;
  static constexpr int kLocality = 1;
  // From the line of the range's first byte.
  void start_range() {
    const ByteRange& r = ranges_[range_];
    next_ = r.begin - reinterpret_cast<uintptr_t>(r.begin) % kLine;
    end_ = r.begin + r.bytes;
  }
  // Moves on to the next range; false when there is none.
  bool next_range() {
    if (range_ + 1 >= n_ranges_) return false;
    ++range_;
    start_range();
    return true;
  }
  const ByteRange* ranges_ = nullptr;
  size_t n_ranges_ = 0;
  size_t range_ = 0;
  const char* next_ = nullptr;
  const char* end_ = nullptr;
  size_t per_step_ = 0;
};

// Query rows rounded to q8_0 (kvc_format_query_format) for scoring against quantized keys, as
// the integer kernels read them: row r's values at values + r * dim, their magnitudes (|value|,
// for the unsigned side of the byte products) likewise, and the scale of its group g at
// scales[r * (dim / 32) + g].
struct QuantizedQueries {
  const int8_t* values;
  const uint8_t* magnitudes;
  const float* scales;
  size_t dim;  // the head dimension, a multiple of 32
};

// Kernels that read rows of the formats with scales (q8_0, q4_0) where they are stored.
struct QuantizedKernels {
  // As TileKernels::logits, for key rows of k_dtype against the rounded queries: integer dot
  // products per group, scaled and summed in f32.
  void (*logits)(const QuantizedQueries& q, size_t rows, const void* const* k, kvc_dtype k_dtype,
                 size_t n_keys, float* logits, float* row_max, Prefetch& ahead);
  // As TileKernels::accumulate, for value rows of v_dtype, dequantized in registers.
  void (*accumulate)(float* acc, size_t rows, const float* weights, const void* const* v,
                     kvc_dtype v_dtype, size_t n_keys, size_t dim, Prefetch& ahead);
};

struct TileKernels {
  const char* name;
  // Blocks of up to this many query rows read f16/bf16 K and V rows where they are stored
  // (when the head dimension needs no padding) instead of converting a tile to f32 first;
  // 0: never. For decode's few rows a separate conversion pass would cost more than the
  // arithmetic.
  size_t max_rows_in_place;
  // dst[0..n) = src[0..n) of `dtype` as f32.
  void (*convert)(const void* src, kvc_dtype dtype, float* dst, size_t n);
  // logits[r * kTileKeys + t] = dot(q row r, key row t) for r < rows, t < n_keys, and
  // row_max[r] = the largest of row r's. Key row t starts at k[t]: a tile's keys may come
  // from several blocks. They are f32, or of the storage dtype for blocks of up to
  // max_rows_in_place rows. Asks for all of `ahead` by the time it returns. The maxima come
  // from the kernel's registers: read back from `logits`, they waited for the partial stores
  // that wrote them.
  void (*logits)(const float* q, size_t rows, const void* const* k, kvc_dtype k_dtype,
                 size_t n_keys, size_t dim, float* logits, float* row_max, Prefetch& ahead);
  // acc row r += sum over t < n_keys of weights[r * kTileKeys + t] * value row t, for
  // r < rows; value row t starts at v[t], as key rows above; `ahead` as for logits.
  void (*accumulate)(float* acc, size_t rows, const float* weights, const void* const* v,
                     kvc_dtype v_dtype, size_t n_keys, size_t dim, Prefetch& ahead);
  // weights[t] = exp(logits[t] - max) for t < n (0 for a logit of -infinity); returns their
  // sum. max >= every logit; both arrays are kTileKeys long, and weights past n may be
  // overwritten.
  float (*softmax_weights)(const float* logits, size_t n, float max, float* weights);
  // For blocks of up to max_rows_in_place rows over keys or values of a format with scales;
  // null: such rows are converted to f32 a tile at a time and go through the kernels above.
  const QuantizedKernels* quantized;
};

// row_max[r] = the largest of logits[r * kTileKeys + t], t < n_keys, for r < rows: for the
// sets that take their maxima from the stored logits.
void max_of_rows(const float* logits, size_t rows, size_t n_keys, float* row_max);

extern const TileKernels portable_kernels;
#if defined(__x86_64__)
#define KVC_CPU_HAVE_AVX2_KERNELS 1
extern const TileKernels avx2_kernels;  // run only where the CPU has AVX2, FMA and F16C
// Also the AVX-512 set's: every CPU with AVX-512 has AVX2.
extern const QuantizedKernels avx2_quantized_kernels;
#define KVC_CPU_HAVE_AVX512_KERNELS 1
extern const TileKernels avx512_kernels;  // run only where the CPU has AVX-512 F, BW and VL
#endif

// The set for this CPU, picked on the first call: avx512, else avx2, else portable.
// KVC_CPU_KERNELS=avx512|avx2|portable in the environment forces one; where it names no set
// or one this CPU cannot run, this fails (plugin error) instead, on every call.
const TileKernels& tile_kernels();

}  // namespace kvc::cpu
