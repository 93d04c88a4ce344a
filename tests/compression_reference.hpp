// A naive model of what a compressing cache should hold: per (layer, KV head) the stored
// tokens with their K/V rows and the attention statistics of DESIGN.md section 5, computed
// with plain double loops, independent of the library's kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

namespace cref {

struct HeadHistory {
  std::vector<int32_t> pos;
  std::vector<float> k, v;  // [tokens][head_dim]
  std::vector<double> attn_sum, attn_last, attn_window;

  size_t tokens() const { return pos.size(); }
};

class SequenceModel {
 public:
  SequenceModel(int layers, int kv_heads, int q_heads, int head_dim, int observation_window)
      : layers_(layers), kv_heads_(kv_heads), q_heads_(q_heads), d_(head_dim),
        window_(observation_window), heads_(static_cast<size_t>(layers * kv_heads)) {}

  HeadHistory& head(int layer, int kv_head) { return heads_[static_cast<size_t>(layer * kv_heads_ + kv_head)]; }

  // Stores n tokens (k, v: [n][kv_heads][head_dim]) without attending, as kvc_append: their
  // statistics start at 0.
  void append(int layer, int n, const int32_t* positions, const float* k, const float* v) {
    const size_t d = static_cast<size_t>(d_);
    for (int h = 0; h < kv_heads_; ++h) {
      HeadHistory& hh = head(layer, h);
      for (int t = 0; t < n; ++t) {
        hh.pos.push_back(positions[t]);
        const size_t row = (static_cast<size_t>(t) * kv_heads_ + h) * d;
        hh.k.insert(hh.k.end(), k + row, k + row + d);
        hh.v.insert(hh.v.end(), v + row, v + row + d);
        hh.attn_sum.push_back(0.0);
        hh.attn_last.push_back(0.0);
        hh.attn_window.push_back(0.0);
      }
    }
  }

  // Stores n tokens (k, v: [n][kv_heads][head_dim]) and attends their queries
  // (q: [n][q_heads][head_dim]); out gets [n][q_heads][head_dim].
  void append_attend(int layer, int n, const int32_t* positions, const float* q, const float* k,
                     const float* v, std::vector<double>& out) {
    const size_t d = static_cast<size_t>(d_);
    append(layer, n, positions, k, v);
    for (int h = 0; h < kv_heads_; ++h) {
      HeadHistory& hh = head(layer, h);
      hh.attn_last.assign(hh.tokens(), 0.0);
      hh.attn_window.assign(hh.tokens(), 0.0);
    }
    const int group = q_heads_ / kv_heads_;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d_));
    out.assign(static_cast<size_t>(n) * q_heads_ * d, 0.0);
    const int window_start = n - std::min(window_, n);
    for (int t = 0; t < n; ++t) {
      for (int qh = 0; qh < q_heads_; ++qh) {
        HeadHistory& hh = head(layer, qh / group);
        const float* qrow = q + (static_cast<size_t>(t) * q_heads_ + qh) * d;
        std::vector<double> p(hh.tokens(), 0.0);
        double max_logit = -INFINITY;
        for (size_t j = 0; j < hh.tokens(); ++j) {
          if (hh.pos[j] > positions[t]) continue;
          double dot = 0.0;
          for (size_t i = 0; i < d; ++i) dot += static_cast<double>(qrow[i]) * hh.k[j * d + i];
          p[j] = dot * scale;
          max_logit = std::max(max_logit, p[j]);
        }
        double denom = 0.0;
        for (size_t j = 0; j < hh.tokens(); ++j) {
          p[j] = hh.pos[j] > positions[t] ? 0.0 : std::exp(p[j] - max_logit);
          denom += p[j];
        }
        double* o = &out[(static_cast<size_t>(t) * q_heads_ + qh) * d];
        for (size_t j = 0; j < hh.tokens(); ++j) {
          p[j] /= denom;
          for (size_t i = 0; i < d; ++i) o[i] += p[j] * hh.v[j * d + i];
          hh.attn_sum[j] += p[j];
          if (t == n - 1) hh.attn_last[j] += p[j] / group;
          if (t >= window_start) hh.attn_window[j] += p[j];
        }
      }
    }
  }

  // Keeps only the tokens at the given positions of (layer, kv_head).
  void keep(int layer, int kv_head, const std::set<int32_t>& kept) {
    HeadHistory& hh = head(layer, kv_head);
    HeadHistory next;
    const size_t d = static_cast<size_t>(d_);
    for (size_t j = 0; j < hh.tokens(); ++j) {
      if (!kept.count(hh.pos[j])) continue;
      next.pos.push_back(hh.pos[j]);
      next.k.insert(next.k.end(), hh.k.begin() + j * d, hh.k.begin() + (j + 1) * d);
      next.v.insert(next.v.end(), hh.v.begin() + j * d, hh.v.begin() + (j + 1) * d);
      next.attn_sum.push_back(hh.attn_sum[j]);
      next.attn_last.push_back(hh.attn_last[j]);
      next.attn_window.push_back(hh.attn_window[j]);
    }
    hh = next;
  }

  int layers() const { return layers_; }
  int kv_heads() const { return kv_heads_; }

 private:
  int layers_, kv_heads_, q_heads_, d_, window_;
  std::vector<HeadHistory> heads_;
};

}  // namespace cref
