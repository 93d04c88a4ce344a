#include "selection.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvc {

std::vector<int32_t> select_kept(const float* scores, int32_t n, int32_t budget,
                                 ProtectedRange range) {
  std::vector<int32_t> kept;
  if (n <= budget) {
    kept.resize(static_cast<size_t>(n));
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  const int32_t head_end = range.sink_end;
  const int32_t tail_begin = range.recent_begin;
  const int32_t protected_count = range.count(n);
  const int32_t chosen = std::clamp(budget - protected_count, 0, tail_begin - head_end);

  std::vector<int32_t> candidates(static_cast<size_t>(tail_begin - head_end));
  std::iota(candidates.begin(), candidates.end(), head_end);
  auto rank = [scores](int32_t i) { return std::isnan(scores[i]) ? -INFINITY : scores[i]; };
  auto better = [&](int32_t a, int32_t b) {
    float ra = rank(a), rb = rank(b);
    return ra != rb ? ra > rb : a > b;
  };
  std::nth_element(candidates.begin(), candidates.begin() + chosen, candidates.end(), better);
  candidates.resize(static_cast<size_t>(chosen));
  std::sort(candidates.begin(), candidates.end());

  kept.reserve(static_cast<size_t>(protected_count + chosen));
  for (int32_t i = 0; i < head_end; ++i) kept.push_back(i);
  kept.insert(kept.end(), candidates.begin(), candidates.end());
  for (int32_t i = tail_begin; i < n; ++i) kept.push_back(i);
  return kept;
}

}  // namespace kvc
