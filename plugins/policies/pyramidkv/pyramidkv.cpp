// pyramidkv (Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal
// Information Funneling"): SnapKV's scores (needs.scorer = "snapkv"), with budgets that
// decrease linearly over layers. Of a head's configured budget c, the p tokens the host
// protects (sinks and recent window, kept in every layer) stay in every layer and the rest
// b = c - p follows the pyramid, as in the reference code:
//   b_min = b / beta,  b_max = 2 b - b_min,
//   budget(layer) = p + round(b_max - (b_max - b_min) * layer / (n_layers - 1))
// rounded to nearest (halves away from zero), so the mean over layers is c (the sum stays
// within n_layers / 2 of n_layers * c). One layer, or c <= p: the configured budget.
// pyramidkv accepts SnapKV's parameters (window, kernel, pooling) and checks them as SnapKV
// does; `beta` (default 20, >= 1) is its own.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "adapter.hpp"
#include "forwarded_params.hpp"
#include "jobs.hpp"
#include "options.hpp"

namespace kvc::policies {
namespace {

class PyramidKv {
 public:
  static constexpr const char* kName = "pyramidkv";
  explicit PyramidKv(ParamReader& params)
      // SnapKV's parameters are checked here, as SnapKV would, and forwarded to it.
      : beta_((read_scorer_params("snapkv", "policy", params),
               params.number("beta", 20.0, 1.0, DBL_MAX, "a number >= 1"))),
        scorer_params_(params.entries(), {"beta"}) {}

  void needs(kvc_policy_needs& needs) const noexcept {
    needs.scorer = "snapkv";
    scorer_params_.fill(needs);
  }

  void budgets(const kvc_budget_request& request, int32_t* budgets) const {
    if (request.n_layers < 1 || request.layer < 0 || request.layer >= request.n_layers) {
      argument_error("budgets: layer is outside 0..n_layers-1");
    }
    if (request.n_heads > 0 && request.jobs == nullptr) argument_error("budgets: jobs is NULL");
    for (int32_t h = 0; h < request.n_heads; ++h) {
      const kvc_score_job& job = request.jobs[h];
      const int64_t protected_tokens = job.n_tokens - protected_range(job).candidates();
      budgets[h] = layer_budget(request.configured[h], protected_tokens, request.layer,
                                request.n_layers);
    }
  }

 private:
  int32_t layer_budget(int32_t configured, int64_t protected_tokens, int32_t layer,
                       int32_t n_layers) const {
    if (n_layers == 1 || configured == INT32_MAX || configured <= protected_tokens) {
      return configured;
    }
    const double base = static_cast<double>(configured - protected_tokens);
    const double b_min = base / beta_;
    const double b_max = 2.0 * base - b_min;
    const double b = b_max - (b_max - b_min) * static_cast<double>(layer) /
                                 static_cast<double>(n_layers - 1);
    const double budget = static_cast<double>(protected_tokens) + std::round(b);
    return static_cast<int32_t>(std::clamp(budget, 0.0, static_cast<double>(INT32_MAX)));
  }

  double beta_;
  ForwardedParams scorer_params_;
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::PyramidKv);
