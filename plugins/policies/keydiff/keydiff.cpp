// keydiff (Park et al. 2025, "KeyDiff: Key Similarity-Based KV Cache Eviction"): keep the
// keys least similar to an anchor, the mean key of the head: score = -cos(k_i, anchor).
// anchor: `normalized_mean` (default) is the mean of the L2-normalised keys, as the KeyDiff
// reference implementation (kvpress KeyDiffPress) computes it; `mean` is the plain mean.
#include <algorithm>
#include <cmath>
#include <vector>

#include "adapter.hpp"
#include "jobs.hpp"
#include "key_math.hpp"
#include "options.hpp"

namespace kvc::policies {
namespace {

constexpr float kNormEpsilon = 1e-12f;    // F.normalize's
constexpr float kCosineEpsilon = 1e-8f;   // F.cosine_similarity's

class KeyDiff {
 public:
  static constexpr const char* kName = "keydiff";
  explicit KeyDiff(ParamReader& params) : options_(KeyDiffOptions::read(params)) {}

  void needs(kvc_policy_needs& needs) const noexcept { needs.stats = KVC_STAT_KEYS; }

  void score(const kvc_score_job* jobs, size_t n_jobs) const {
    std::vector<float> norms;
    std::vector<float> anchor;
    for (size_t j = 0; j < n_jobs; ++j) {
      const kvc_score_job& job = jobs[j];
      check_job(job, j, KVC_STAT_KEYS);
      const int32_t n = job.n_tokens;
      if (n == 0) continue;
      const size_t dim = static_cast<size_t>(job.head_dim);
      auto row = [&](int32_t i) { return job.keys + dim * static_cast<size_t>(i); };
      norms.resize(static_cast<size_t>(n));
      for (int32_t i = 0; i < n; ++i) norms[i] = std::sqrt(dot(row(i), row(i), dim));
      anchor.assign(dim, 0.0f);
      for (int32_t i = 0; i < n; ++i) {
        float weight = options_.anchor == Anchor::normalized_mean
                           ? 1.0f / std::max(norms[i], kNormEpsilon)
                           : 1.0f;
        add_scaled(anchor.data(), row(i), weight, dim);
      }
      const float inv_n = 1.0f / static_cast<float>(n);
      for (size_t d = 0; d < dim; ++d) anchor[d] *= inv_n;
      const float anchor_norm = std::sqrt(dot(anchor.data(), anchor.data(), dim));
      for (int32_t i = 0; i < n; ++i) {
        float cosine = dot(row(i), anchor.data(), dim) /
                       std::max(norms[i] * anchor_norm, kCosineEpsilon);
        job.scores[i] = -cosine;
      }
    }
  }

 private:
  KeyDiffOptions options_;
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::KeyDiff);
