#include "attention_split.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvc::cpu {

PartialStates::PartialStates(size_t n_parts, size_t rows, const AttentionShape& s)
    : rows_(rows),
      dim_(s.padded_dim),
      acc_(n_parts * rows_ * dim_),
      max_(n_parts * rows_),
      sum_(max_.size()) {}

void PartialStates::save(size_t index, const AttentionWorkspace& w) {
  std::copy_n(w.acc.begin(), w.rows() * dim_, acc_.begin() + index * rows_ * dim_);
  std::copy_n(w.row_max.begin(), w.rows(), max_.begin() + index * rows_);
  std::copy_n(w.row_sum.begin(), w.rows(), sum_.begin() + index * rows_);
}

void PartialStates::merge(const kvc_attend_job& job, size_t first_query, size_t n_queries,
                          size_t first, size_t n, const AttentionShape& s) const {
  for (size_t row = 0; row < n_queries * s.group_size; ++row) {
    float* out = job.out + (first_query + row / s.group_size) * job.out_stride +
                 (row % s.group_size) * s.head_dim;
    std::fill_n(out, s.head_dim, 0.0f);
    float row_max = -std::numeric_limits<float>::infinity();
    for (size_t p = first; p < first + n; ++p) row_max = std::max(row_max, max_[p * rows_ + row]);
    if (row_max == -std::numeric_limits<float>::infinity()) continue;  // saw no key: zeros
    float row_sum = 0.0f;
    for (size_t p = first; p < first + n; ++p) {
      const float weight =
          std::exp(max_[p * rows_ + row] - row_max);  // 0 for a part that saw no key
      row_sum += sum_[p * rows_ + row] * weight;
      const float* acc = acc_.data() + (p * rows_ + row) * dim_;
      for (size_t e = 0; e < s.head_dim; ++e) out[e] += acc[e] * weight;
    }
    const float inv_sum = 1.0f / row_sum;
    for (size_t e = 0; e < s.head_dim; ++e) out[e] *= inv_sum;
  }
}

}  // namespace kvc::cpu
