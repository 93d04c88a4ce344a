// The naive reference the library is checked against: plain double-precision loops over a
// plain std::vector K/V history per (sequence, layer). Written independently of the library
// (no core header is used; sizes are the public format table's), so the two can only agree by
// both being right.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kvcache/kvcache_format.h"

namespace ref {

// ------------------------------------------------------------------ dtype rounding
// Storage dtypes are rounded to nearest, ties to even (what F16C / the usual bf16 conversion
// do). The reference is fed the rounded values, so only accumulation error remains.

inline uint32_t float_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

inline float bits_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // f16 subnormal (or zero)
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry rolls into the exponent
  return static_cast<uint16_t>(sign | h);
}

inline float f16_to_f32(uint16_t h) {
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return static_cast<float>(sign * std::ldexp(static_cast<double>(mant), -24));
  if (exp == 31) return mant ? NAN : static_cast<float>(sign * INFINITY);
  return static_cast<float>(sign * std::ldexp(static_cast<double>(1024 + mant), exp - 25));
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

inline float bf16_to_f32(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// dtype codes match kvc_dtype: 0 = f32, 1 = f16, 2 = bf16.
inline float round_to_dtype(float f, int dtype) {
  switch (dtype) {
    case 0: return f;
    case 1: return f16_to_f32(f32_to_f16(f));
    case 2: return bf16_to_f32(f32_to_bf16(f));
    default: throw std::invalid_argument("unknown dtype");
  }
}

// Encodes floats as dtype elements into raw bytes (for tensors passed in the storage dtype),
// sized by the public format table.
inline std::vector<unsigned char> encode(const std::vector<float>& values, int dtype) {
  std::vector<unsigned char> out(kvc_format_row_bytes(dtype, values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == 0) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t h = dtype == 1 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// ------------------------------------------------------------------ random inputs
// A fixed-seed generator with a portable mapping to [-1, 1] (std::uniform_real_distribution
// is not specified bit-for-bit across standard libraries).
class Rng {
 public:
  explicit Rng(uint32_t seed) : gen_(seed) {}
  float uniform() {  // in [-1, 1]
    const double u = static_cast<double>(gen_()) / 4294967295.0;
    return static_cast<float>(2.0 * u - 1.0);
  }
  std::vector<float> vec(size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = uniform();
    return v;
  }
  uint32_t next(uint32_t bound) { return static_cast<uint32_t>(gen_() % bound); }

 private:
  std::mt19937 gen_;
};

// ------------------------------------------------------------------ attention
struct Options {
  double scale = 0.0;       // 0: 1/sqrt(head_dim)
  int32_t window = 0;       // > 0: keys at positions (p - window, p]
  double softcap = 0.0;     // > 0: c * tanh(x / c)
  // The format each head's query row, times the scale (in f32), is rounded to before the dot
  // products (kvc_format_query_format of K's format): f32 leaves it as given.
  int query_format = KVC_DTYPE_F32;
};

// The K/V history of one (sequence, layer): every stored token, all KV heads.
struct History {
  int kv_heads = 0;
  int head_dim = 0;
  std::vector<int32_t> pos;
  std::vector<double> k;  // [tokens][kv_heads][head_dim]
  std::vector<double> v;

  History() = default;
  History(int kv_heads_, int head_dim_) : kv_heads(kv_heads_), head_dim(head_dim_) {}

  size_t tokens() const { return pos.size(); }

  // Appends one token; k_row and v_row hold kv_heads * head_dim values.
  void append(int32_t p, const float* k_row, const float* v_row) {
    pos.push_back(p);
    const size_t n = static_cast<size_t>(kv_heads) * head_dim;
    for (size_t i = 0; i < n; ++i) k.push_back(k_row[i]);
    for (size_t i = 0; i < n; ++i) v.push_back(v_row[i]);
  }
};

// Attention of one query token at position p: q holds q_heads * head_dim values, out gets
// q_heads * head_dim values. Query head h reads KV head h / (q_heads / kv_heads).
inline void attend(const History& hist, int q_heads, const float* q, int32_t p,
                   const Options& opt, double* out) {
  const int d = hist.head_dim;
  if (q_heads % hist.kv_heads != 0) throw std::invalid_argument("q_heads % kv_heads");
  const int group = q_heads / hist.kv_heads;
  const double scale = opt.scale != 0.0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const size_t n = hist.tokens();
  std::vector<double> logits(n);
  std::vector<char> visible(n);
  const bool rounded_query = opt.query_format != KVC_DTYPE_F32;
  std::vector<float> scaled(d), query(d);
  std::vector<unsigned char> query_row(kvc_format_row_bytes(opt.query_format, d));
  for (int h = 0; h < q_heads; ++h) {
    const int g = h / group;
    const float* qh = q + static_cast<size_t>(h) * d;
    if (rounded_query) {
      for (int i = 0; i < d; ++i) scaled[i] = qh[i] * static_cast<float>(scale);
      if (!kvc_format_row_from_f32(opt.query_format, scaled.data(), query_row.data(), d) ||
          !kvc_format_row_to_f32(opt.query_format, query_row.data(), query.data(), d))
        throw std::invalid_argument("query format");
      qh = query.data();
    }
    double* oh = out + static_cast<size_t>(h) * d;
    double max_logit = -INFINITY;
    bool any = false;
    for (size_t t = 0; t < n; ++t) {
      const int32_t kp = hist.pos[t];
      visible[t] = kp <= p && (opt.window <= 0 || kp > p - opt.window);
      if (!visible[t]) continue;
      const double* kr = &hist.k[(t * hist.kv_heads + g) * d];
      double dot = 0.0;
      for (int i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * kr[i];
      double logit = rounded_query ? dot : dot * scale;
      if (opt.softcap > 0.0) logit = opt.softcap * std::tanh(logit / opt.softcap);
      logits[t] = logit;
      if (logit > max_logit) max_logit = logit;
      any = true;
    }
    for (int i = 0; i < d; ++i) oh[i] = 0.0;
    if (!any) continue;
    double denom = 0.0;
    for (size_t t = 0; t < n; ++t) {
      if (!visible[t]) continue;
      const double w = std::exp(logits[t] - max_logit);
      denom += w;
      const double* vr = &hist.v[(t * hist.kv_heads + g) * d];
      for (int i = 0; i < d; ++i) oh[i] += w * vr[i];
    }
    for (int i = 0; i < d; ++i) oh[i] /= denom;
  }
}

}  // namespace ref
