// The CPU backend's tile kernels (plugins/cpu/kernels.hpp), every entry point, against a
// double-precision naive reference over random tiles: f32/f16/bf16 rows, head dims that are
// and are not multiples of 16, 1-9 query rows, 1-kTileKeys keys. Each buffer is exactly as
// long as the contract says, so that ASan sees a kernel reading or writing past it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_sets.hpp"
#include "kvcache/kvcache_format.h"
#include "tile_kernel_sets.hpp"

namespace {

using kvc::cpu::kTileKeys;
using kvc::cpu::Prefetch;
using kvc::cpu::TileKernels;

constexpr kvc_dtype kDtypes[] = {KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16};
constexpr size_t kDims[] = {8, 24, 64, 72, 128, 256};
constexpr size_t kMaxRows = 9;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The value of f16 bits, decoded here rather than by the library.
double f16_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                                         : std::ldexp(mantissa + 1024, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

double bf16_value(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// `count` random elements of `dtype` (finite, magnitudes about 2^-6 to 2^2, some f16
// subnormals) and their exact values.
struct Elements {
  kvc_dtype dtype;
  std::vector<float> f32;
  std::vector<uint16_t> bits;
  std::vector<double> value;

  Elements(kvc_dtype type, size_t count, std::mt19937& rng) : dtype(type), value(count) {
    std::uniform_int_distribution<int> random_bits(0, 0xFFFF);
    if (dtype == KVC_DTYPE_F32) {
      std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
      f32.resize(count);
      for (size_t i = 0; i < count; ++i) value[i] = f32[i] = uniform(rng);
      return;
    }
    bits.resize(count);
    for (size_t i = 0; i < count; ++i) {
      const int r = random_bits(rng);
      const uint16_t sign = uint16_t(r & 0x8000);
      if (dtype == KVC_DTYPE_F16) {
        // Exponents 9..17 (2^-6..2^2), one in 16 subnormal.
        const int exponent = (r & 0xF00) == 0 ? 0 : 9 + (r >> 8) % 9;
        bits[i] = uint16_t(sign | exponent << 10 | (r * 7) % 1024);
        value[i] = f16_value(bits[i]);
      } else {
        bits[i] = uint16_t(sign | (121 + (r >> 8) % 9) << 7 | (r * 7) % 128);
        value[i] = bf16_value(bits[i]);
      }
    }
  }
  size_t bytes() const {
    return dtype == KVC_DTYPE_F32 ? f32.size() * sizeof(float) : bits.size() * sizeof(uint16_t);
  }
  const void* data() const {
    return dtype == KVC_DTYPE_F32 ? static_cast<const void*>(f32.data()) : bits.data();
  }
  std::vector<float> as_f32() const { return std::vector<float>(value.begin(), value.end()); }
};

std::vector<float> random_floats(size_t count, float low, float high, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> out(count);
  for (float& x : out) x = uniform(rng);
  return out;
}

// The rows a kernel is given for a block of `rows` query rows: where they are stored (f32,
// or 16-bit for blocks the set reads in place), else converted to f32 by the set's convert.
// Stored rows each have an allocation of their own, as the keys of a tile that spans blocks
// do: a kernel that steps from one row to the next by the row length reads elsewhere, and
// one that reads past a row's end is caught by ASan.
struct KernelRows {
  std::vector<std::vector<char>> stored;
  std::vector<float> converted;
  std::vector<const void*> rows;
  std::vector<kvc::cpu::ByteRange> lines;  // the rows' bytes
  kvc_dtype dtype;

  KernelRows(const TileKernels& set, const Elements& e, size_t block_rows, size_t n_keys) {
    const size_t dim = e.value.size() / n_keys;
    if (e.dtype == KVC_DTYPE_F32 || block_rows <= set.max_rows_in_place) {
      dtype = e.dtype;
      const size_t row_bytes = e.bytes() / n_keys;
      for (size_t t = 0; t < n_keys; ++t) {
        const char* row = static_cast<const char*>(e.data()) + t * row_bytes;
        stored.emplace_back(row, row + row_bytes);
        rows.push_back(stored.back().data());
        lines.push_back({stored.back().data(), row_bytes});
      }
      return;
    }
    dtype = KVC_DTYPE_F32;
    converted.resize(e.value.size());
    set.convert(e.data(), e.dtype, converted.data(), converted.size());
    for (size_t t = 0; t < n_keys; ++t) rows.push_back(converted.data() + t * dim);
    lines.push_back({reinterpret_cast<const char*>(converted.data()), converted.size() * sizeof(float)});
  }
  // The rows' lines, all of which the kernel must have asked for when it returns.
  Prefetch prefetch() const { return {lines.data(), lines.size()}; }
};

void check_convert(const TileKernels& set, std::mt19937& rng) {
  for (kvc_dtype dtype : kDtypes) {
    for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 63, 64, 65, 100, 257}) {
      const Elements e(dtype, n, rng);
      std::vector<float> out(n);
      set.convert(e.data(), dtype, out.data(), n);
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += double(out[i]) != e.value[i];
      CHECK_MESSAGE(wrong == 0, std::string(set.name) << " convert dtype " << dtype << " n " << n);
    }
  }
}

void check_logits(const TileKernels& set, std::mt19937& rng) {
  for (kvc_dtype dtype : kDtypes) {
    for (size_t dim : kDims) {
      for (size_t rows = 1; rows <= kMaxRows; ++rows) {
        for (size_t n_keys = 1; n_keys <= kTileKeys; ++n_keys) {
          const std::vector<float> q = random_floats(rows * dim, -1.0f, 1.0f, rng);
          const Elements k(dtype, n_keys * dim, rng);
          const KernelRows given(set, k, rows, n_keys);
          std::vector<float> logits(rows * kTileKeys, kNaN), row_max(rows, kNaN);
          Prefetch ahead = given.prefetch();
          set.logits(q.data(), rows, given.rows.data(), given.dtype, n_keys, dim, logits.data(),
                     row_max.data(), ahead);
          CHECK_MESSAGE(ahead.done(), set.name << " logits left lines unrequested");
          double worst = 0;  // the largest error over its bound
          for (size_t r = 0; r < rows; ++r) {
            // Each row's max is exactly its largest logit as stored.
            float largest = -std::numeric_limits<float>::infinity();
            for (size_t t = 0; t < n_keys; ++t) largest = std::max(largest, logits[r * kTileKeys + t]);
            CHECK_MESSAGE(row_max[r] == largest, set.name << " row max, dtype " << dtype << " dim "
                                                          << dim << " rows " << rows << " keys "
                                                          << n_keys << " row " << r);
            for (size_t t = 0; t < n_keys; ++t) {
              double dot = 0, magnitude = 0;
              for (size_t i = 0; i < dim; ++i) {
                dot += double(q[r * dim + i]) * k.value[t * dim + i];
                magnitude += std::fabs(double(q[r * dim + i]) * k.value[t * dim + i]);
              }
              const double error = std::fabs(logits[r * kTileKeys + t] - dot);
              worst = std::max(worst, std::isnan(error) ? 1e9 : error / (1e-5 * magnitude + 1e-30));
            }
          }
          CHECK_MESSAGE(worst <= 1.0, std::string(set.name) << " logits dtype " << dtype << " dim " << dim
                                               << " rows " << rows << " keys " << n_keys);
        }
      }
    }
  }
}

void check_accumulate(const TileKernels& set, std::mt19937& rng) {
  for (kvc_dtype dtype : kDtypes) {
    for (size_t dim : kDims) {
      for (size_t rows = 1; rows <= kMaxRows; ++rows) {
        for (size_t n_keys = 1; n_keys <= kTileKeys; ++n_keys) {
          const Elements v(dtype, n_keys * dim, rng);
          const KernelRows given(set, v, rows, n_keys);
          // Weights past n_keys are NaN: a kernel that reads them spoils its rows.
          std::vector<float> weights(rows * kTileKeys, kNaN);
          for (size_t r = 0; r < rows; ++r)
            for (size_t t = 0; t < n_keys; ++t)
              weights[r * kTileKeys + t] = random_floats(1, 0.0f, 1.0f, rng)[0];
          const std::vector<float> before = random_floats(rows * dim, -1.0f, 1.0f, rng);
          std::vector<float> acc = before;
          Prefetch ahead = given.prefetch();
          set.accumulate(acc.data(), rows, weights.data(), given.rows.data(), given.dtype, n_keys,
                         dim, ahead);
          CHECK_MESSAGE(ahead.done(), set.name << " accumulate left lines unrequested");
          double worst = 0;
          for (size_t r = 0; r < rows; ++r) {
            for (size_t i = 0; i < dim; ++i) {
              double sum = before[r * dim + i], magnitude = std::fabs(sum);
              for (size_t t = 0; t < n_keys; ++t) {
                const double term = double(weights[r * kTileKeys + t]) * v.value[t * dim + i];
                sum += term;
                magnitude += std::fabs(term);
              }
              const double error = std::fabs(acc[r * dim + i] - sum);
              worst = std::max(worst, std::isnan(error) ? 1e9 : error / (1e-5 * magnitude + 1e-30));
            }
          }
          CHECK_MESSAGE(worst <= 1.0, std::string(set.name) << " accumulate dtype " << dtype << " dim "
                                               << dim << " rows " << rows << " keys " << n_keys);
        }
      }
    }
  }
}

// Logits from -30 to 0 below the maximum, some -infinity (masked keys) and some under -87
// (0, where exp leaves the normal floats); the row past n is NaN, which must not count.
void check_softmax_weights(const TileKernels& set, std::mt19937& rng) {
  const float infinity = std::numeric_limits<float>::infinity();
  std::uniform_int_distribution<int> kind(0, 7);
  for (size_t n = 1; n <= kTileKeys; ++n) {
    for (int round = 0; round < 8; ++round) {
      std::vector<float> logits(kTileKeys, kNaN);
      const float max = random_floats(1, -5.0f, 5.0f, rng)[0];
      for (size_t t = 0; t < n; ++t) {
        const int k = kind(rng);
        logits[t] = k == 0   ? -infinity
                    : k == 1 ? max - random_floats(1, 87.5f, 200.0f, rng)[0]
                             : max - random_floats(1, 0.0f, 30.0f, rng)[0];
      }
      if (round == 0) logits[n - 1] = max;
      std::vector<float> weights(kTileKeys);
      const float sum = set.softmax_weights(logits.data(), n, max, weights.data());
      double expected_sum = 0, worst = 0;
      for (size_t t = 0; t < n; ++t) {
        const double x = double(logits[t]) - max;
        const double expected = x < -87.5 ? 0.0 : std::exp(x);  // the -87 cut, rounded
        expected_sum += expected;
        // A few ulp, and the rounding of logits[t] - max to float (half an ulp of x).
        const double bound = (5e-7 + 6e-8 * std::fabs(x)) * expected + 1e-37;
        const double error = std::fabs(weights[t] - expected);
        worst = std::max(worst, std::isnan(error) ? 1e9 : error / bound);
      }
      CHECK_MESSAGE(worst <= 1.0, std::string(set.name) << " softmax_weights n " << n << " round " << round);
      CHECK_MESSAGE(std::fabs(sum - expected_sum) <= 2e-6 * expected_sum + 1e-37,
                    std::string(set.name) << " softmax_weights sum, n " << n << " round " << round);
    }
  }
}

// Rows of a format with scales from random f32 values (the format table's reference
// encoding), each row in an allocation of its own as in KernelRows, and their values as the
// reference decoding gives them.
struct QuantizedRows {
  std::vector<std::vector<unsigned char>> stored;
  std::vector<const void*> rows;
  std::vector<kvc::cpu::ByteRange> lines;
  std::vector<double> value;

  QuantizedRows(kvc_dtype dtype, size_t n_rows, size_t dim, std::mt19937& rng)
      : value(n_rows * dim) {
    const size_t row_bytes = kvc_format_row_bytes(dtype, dim);
    for (size_t t = 0; t < n_rows; ++t) {
      // Each row at its own scale, some groups all zero.
      const float scale = std::ldexp(1.0f, int(rng() % 9) - 6);
      std::vector<float> x = random_floats(dim, -scale, scale, rng);
      if (rng() % 8 == 0) std::fill_n(x.begin(), 32, 0.0f);
      stored.emplace_back(row_bytes);
      REQUIRE(kvc_format_row_from_f32(dtype, x.data(), stored.back().data(), dim));
      std::vector<float> decoded(dim);
      REQUIRE(kvc_format_row_to_f32(dtype, stored.back().data(), decoded.data(), dim));
      std::copy(decoded.begin(), decoded.end(), value.begin() + t * dim);
      rows.push_back(stored.back().data());
      lines.push_back({reinterpret_cast<const char*>(stored.back().data()), row_bytes});
    }
  }
  Prefetch prefetch() const { return {lines.data(), lines.size()}; }
};

// Query rows as the integer kernels take them: random values in [-127, 127] per group of 32
// with a random scale, and the values they stand for.
struct RoundedQueries {
  std::vector<int8_t> values;
  std::vector<uint8_t> magnitudes;
  std::vector<float> scales;
  std::vector<double> value;
  kvc::cpu::QuantizedQueries view;

  RoundedQueries(size_t rows, size_t dim, std::mt19937& rng)
      : values(rows * dim), magnitudes(values.size()), scales(values.size() / 32),
        value(values.size()) {
    std::uniform_int_distribution<int> byte(-127, 127);
    for (float& scale : scales) scale = random_floats(1, 1e-3f, 1e-2f, rng)[0];
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = int8_t(byte(rng));
      magnitudes[i] = uint8_t(std::abs(values[i]));
      value[i] = double(values[i]) * scales[i / 32];
    }
    view = {values.data(), magnitudes.data(), scales.data(), dim};
  }
};

constexpr kvc_dtype kQuantized[] = {KVC_DTYPE_Q8_0, KVC_DTYPE_Q4_0};
constexpr size_t kQuantizedDims[] = {32, 64, 96, 128, 256};

void check_quantized_logits(const TileKernels& set, std::mt19937& rng) {
  for (kvc_dtype dtype : kQuantized) {
    for (size_t dim : kQuantizedDims) {
      for (size_t rows = 1; rows <= set.max_rows_in_place; ++rows) {
        for (size_t n_keys = 1; n_keys <= kTileKeys; n_keys += 1 + n_keys / 4) {
          const RoundedQueries q(rows, dim, rng);
          const QuantizedRows k(dtype, n_keys, dim, rng);
          std::vector<float> logits(rows * kTileKeys, kNaN), row_max(rows, kNaN);
          Prefetch ahead = k.prefetch();
          set.quantized->logits(q.view, rows, k.rows.data(), dtype, n_keys, logits.data(),
                                row_max.data(), ahead);
          CHECK_MESSAGE(ahead.done(), set.name << " quantized logits left lines unrequested");
          double worst = 0;
          for (size_t r = 0; r < rows; ++r) {
            float largest = -std::numeric_limits<float>::infinity();
            for (size_t t = 0; t < n_keys; ++t) largest = std::max(largest, logits[r * kTileKeys + t]);
            CHECK(row_max[r] == largest);
            for (size_t t = 0; t < n_keys; ++t) {
              double dot = 0, magnitude = 0;
              for (size_t i = 0; i < dim; ++i) {
                const double product = q.value[r * dim + i] * k.value[t * dim + i];
                dot += product;
                magnitude += std::fabs(product);
              }
              const double error = std::fabs(logits[r * kTileKeys + t] - dot);
              worst = std::max(worst, std::isnan(error) ? 1e9 : error / (1e-5 * magnitude + 1e-30));
            }
          }
          CHECK_MESSAGE(worst <= 1.0, std::string(set.name) << " quantized logits " << kvc_format_name(dtype)
                                               << " dim " << dim << " rows " << rows << " keys " << n_keys);
        }
      }
    }
  }
}

void check_quantized_accumulate(const TileKernels& set, std::mt19937& rng) {
  for (kvc_dtype dtype : kQuantized) {
    for (size_t dim : kQuantizedDims) {
      for (size_t rows = 1; rows <= set.max_rows_in_place; ++rows) {
        for (size_t n_keys = 1; n_keys <= kTileKeys; n_keys += 1 + n_keys / 4) {
          const QuantizedRows v(dtype, n_keys, dim, rng);
          std::vector<float> weights(rows * kTileKeys, kNaN);
          for (size_t r = 0; r < rows; ++r)
            for (size_t t = 0; t < n_keys; ++t)
              weights[r * kTileKeys + t] = random_floats(1, 0.0f, 1.0f, rng)[0];
          const std::vector<float> before = random_floats(rows * dim, -1.0f, 1.0f, rng);
          std::vector<float> acc = before;
          Prefetch ahead = v.prefetch();
          set.quantized->accumulate(acc.data(), rows, weights.data(), v.rows.data(), dtype,
                                    n_keys, dim, ahead);
          CHECK_MESSAGE(ahead.done(), set.name << " quantized accumulate left lines unrequested");
          double worst = 0;
          for (size_t r = 0; r < rows; ++r) {
            for (size_t i = 0; i < dim; ++i) {
              double sum = before[r * dim + i], magnitude = std::fabs(sum);
              for (size_t t = 0; t < n_keys; ++t) {
                const double term = double(weights[r * kTileKeys + t]) * v.value[t * dim + i];
                sum += term;
                magnitude += std::fabs(term);
              }
              const double error = std::fabs(acc[r * dim + i] - sum);
              worst = std::max(worst, std::isnan(error) ? 1e9 : error / (1e-5 * magnitude + 1e-30));
            }
          }
          CHECK_MESSAGE(worst <= 1.0, std::string(set.name) << " quantized accumulate "
                                               << kvc_format_name(dtype) << " dim " << dim
                                               << " rows " << rows << " keys " << n_keys);
        }
      }
    }
  }
}

void check_set(const TileKernels& set) {
  std::mt19937 rng(12);
  check_convert(set, rng);
  check_logits(set, rng);
  check_accumulate(set, rng);
  check_softmax_weights(set, rng);
  if (set.quantized) {
    check_quantized_logits(set, rng);
    check_quantized_accumulate(set, rng);
  }
}

}  // namespace

TEST_CASE("tile kernels: avx512 emulated with SIMDe match the double-precision reference") {
  check_set(kvc::cpu::emulated_avx512_kernels);
}

TEST_CASE("tile kernels: portable match the double-precision reference") {
  check_set(kvc::cpu::portable_kernels);
}

#ifdef KVC_CPU_HAVE_AVX2_KERNELS
TEST_CASE("tile kernels: avx2 on this CPU match the double-precision reference" *
          doctest::skip(!kvt::cpu_runs_kernels("avx2"))) {
  check_set(kvc::cpu::avx2_kernels);
}
#endif

#ifdef KVC_CPU_HAVE_AVX512_KERNELS
TEST_CASE("tile kernels: avx512 on this CPU match the double-precision reference" *
          doctest::skip(!kvt::cpu_runs_kernels("avx512"))) {
  check_set(kvc::cpu::avx512_kernels);
}
#endif
