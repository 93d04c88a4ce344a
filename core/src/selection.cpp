#include "selection.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvc {

namespace {

float rank_of(float score) { return std::isnan(score) ? -INFINITY : score; }

}  // namespace

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
  auto better = [&](int32_t a, int32_t b) {
    float ra = rank_of(scores[a]), rb = rank_of(scores[b]);
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

std::vector<Fate> select_tiers(const float* scores, const uint8_t* demoted, int32_t n,
                               size_t budget_bytes, size_t keep_bytes, TierCosts costs,
                               ProtectedRange range) {
  const size_t count = static_cast<size_t>(n);
  std::vector<Fate> fates(count, Fate::evict);
  auto cost = [&](int32_t i) { return demoted[i] ? costs.demoted : costs.keep; };
  size_t now = 0;
  for (int32_t i = 0; i < n; ++i) now += cost(i);
  if (now <= budget_bytes) {
    for (int32_t i = 0; i < n; ++i) fates[static_cast<size_t>(i)] = demoted[i] ? Fate::demote : Fate::keep;
    return fates;
  }
  size_t spent = 0, kept = 0;
  std::vector<int32_t> candidates;
  candidates.reserve(count);
  for (int32_t i = 0; i < n; ++i) {
    if (i >= range.sink_end && i < range.recent_begin) {
      candidates.push_back(i);
      continue;
    }
    fates[static_cast<size_t>(i)] = demoted[i] ? Fate::demote : Fate::keep;
    spent += cost(i);
    if (!demoted[i]) kept += costs.keep;
  }
  std::sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
    const float ra = rank_of(scores[a]), rb = rank_of(scores[b]);
    return ra != rb ? ra > rb : a > b;
  });
  for (int32_t i : candidates) {
    if (spent + costs.demoted > budget_bytes) break;  // nothing smaller is left to place
    Fate& fate = fates[static_cast<size_t>(i)];
    if (!demoted[i] && kept + costs.keep <= keep_bytes && spent + costs.keep <= budget_bytes) {
      fate = Fate::keep;
      kept += costs.keep;
      spent += costs.keep;
    } else {
      fate = Fate::demote;
      spent += costs.demoted;
    }
  }
  return fates;
}

size_t keep_share_bytes(double keep, size_t budget_bytes) {
  return static_cast<size_t>(keep * static_cast<double>(budget_bytes));
}

TierCounts modelled_tiers(int64_t n, int64_t demoted, int64_t protected_count,
                          size_t budget_bytes, size_t keep_bytes, TierCosts costs) {
  const int64_t primary = n - demoted;
  const auto bytes = [&](int64_t kept, int64_t low) {
    return static_cast<size_t>(kept) * costs.keep + static_cast<size_t>(low) * costs.demoted;
  };
  if (bytes(primary, demoted) <= budget_bytes) return {primary, demoted};
  const int64_t protected_kept = std::min(protected_count, primary);
  const int64_t protected_demoted = protected_count - protected_kept;
  size_t spent = bytes(protected_kept, protected_demoted);
  const size_t kept_bytes = bytes(protected_kept, 0);
  int64_t kept = protected_kept;
  if (kept_bytes <= keep_bytes && spent <= budget_bytes) {
    const size_t room = std::min(keep_bytes - kept_bytes, budget_bytes - spent);
    const int64_t more = std::min(static_cast<int64_t>(room / costs.keep), primary - protected_kept);
    kept += more;
    spent += bytes(more, 0);
  }
  const int64_t candidates = n - kept - protected_demoted;
  const int64_t low = spent <= budget_bytes
                          ? std::min(candidates, static_cast<int64_t>((budget_bytes - spent) / costs.demoted))
                          : 0;
  return {kept, protected_demoted + low};
}

}  // namespace kvc
