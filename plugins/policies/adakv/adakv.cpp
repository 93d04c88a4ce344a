// adakv (Feng et al. 2024, "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget
// Allocation"): the heads of one (sequence, layer) share their budgets. Scores come from
// another policy (`scorer`, default snapkv); adakv only sets budgets:
//   - each head h keeps its protected tokens P_h (sinks and recent window, as the host
//     protects them); the rest of its configured budget, F_h = max(configured_h - P_h, 0),
//     goes to a pool of sum_h F_h slots shared by the layer;
//   - each head first gets its floor, floor_h = min(floor(alpha * F_h), its candidates)
//     (alpha = `floor`, default 0.2), filled by its own best candidates;
//   - the pool's remaining slots go to the highest raw scores across all heads jointly, among
//     each head's candidates beyond its own top floor_h (ties: later token, then lower head);
//   - budget_h = P_h + floor_h + the number it won (never more than its tokens).
// Without sinks and recent tokens this is Ada-KV's allocation over the configured budgets.
// adakv accepts its scorer's parameters (checked as the scorer would for a built-in one).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "adapter.hpp"
#include "forwarded_params.hpp"
#include "jobs.hpp"
#include "options.hpp"

namespace kvc::policies {
namespace {

struct Candidate {
  float rank;
  int32_t index;
  int32_t head;
};

// Higher score first; ties toward the later token, then the lower head.
bool better(const Candidate& a, const Candidate& b) {
  if (a.rank != b.rank) return a.rank > b.rank;
  if (a.index != b.index) return a.index > b.index;
  return a.head < b.head;
}

class AdaKv {
 public:
  static constexpr const char* kName = "adakv";
  explicit AdaKv(ParamReader& params)
      : scorer_(params.text("scorer", "snapkv")),
        alpha_(params.number("floor", 0.2, 0.0, 1.0)),
        scorer_params_((read_scorer_params(scorer_, "scorer", params), params.entries()),
                       {"scorer", "floor"}) {
    params.finish("adakv with scorer " + scorer_);
  }

  void needs(kvc_policy_needs& needs) const noexcept {
    needs.scorer = scorer_.c_str();
    scorer_params_.fill(needs);
  }

  void budgets(const kvc_budget_request& request, int32_t* budgets) const {
    const int32_t heads = request.n_heads;
    if (heads > 0 && request.jobs == nullptr) argument_error("budgets: jobs is NULL");
    std::vector<int64_t> taken(static_cast<size_t>(heads));  // P_h + floor_h, then + won
    std::vector<Candidate> pool;
    std::vector<Candidate> own;
    int64_t slots = 0;  // sum of F_h minus the floors
    for (int32_t h = 0; h < heads; ++h) {
      const kvc_score_job& job = request.jobs[h];
      check_job(job, static_cast<size_t>(h), 0);
      const ProtectedRange range = protected_range(job);
      const int64_t protected_tokens = job.n_tokens - range.candidates();
      const int64_t free = std::max<int64_t>(int64_t{request.configured[h]} - protected_tokens, 0);
      const int64_t floor = std::min<int64_t>(
          static_cast<int64_t>(std::floor(alpha_ * static_cast<double>(free))), range.candidates());
      own.clear();
      for (int32_t i = range.head_end; i < range.tail_begin; ++i) {
        own.push_back(Candidate{rank_of(job.scores[i]), i, h});
      }
      // The head's top `floor` candidates are its own; the others compete in the pool.
      std::nth_element(own.begin(), own.begin() + floor, own.end(), better);
      pool.insert(pool.end(), own.begin() + floor, own.end());
      taken[static_cast<size_t>(h)] = protected_tokens + floor;
      slots += free - floor;
    }
    if (slots < static_cast<int64_t>(pool.size())) {
      std::nth_element(pool.begin(), pool.begin() + slots, pool.end(), better);
      pool.resize(static_cast<size_t>(slots));
    }
    for (const Candidate& winner : pool) ++taken[static_cast<size_t>(winner.head)];
    for (int32_t h = 0; h < heads; ++h) {
      budgets[h] = static_cast<int32_t>(std::min<int64_t>(taken[static_cast<size_t>(h)], INT32_MAX));
    }
  }

 private:
  std::string scorer_;
  double alpha_;
  ForwardedParams scorer_params_;
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::AdaKv);
