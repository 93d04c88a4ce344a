// Peak storage of one sequence under the configured policy, simulated step by step.
#include <algorithm>
#include <cmath>

#include "cache.hpp"
#include "error.hpp"

namespace kvc {
namespace {

// Tokens one (layer, KV head) holds over a request, with the policy's triggers.
class LengthSimulation {
 public:
  LengthSimulation(const PolicyConfig* policy, const Geometry& g) : policy_(policy), g_(g) {}

  void add(int32_t tokens) {
    length_ += tokens;
    seen_ += tokens;
    note();
  }
  void compress() {
    if (!policy_) return;
    int64_t budget = budget_tokens();
    int64_t protected_tokens = std::min<int64_t>(length_, int64_t{policy_->sinks} + policy_->recent);
    length_ = std::min(length_, std::max(budget, protected_tokens));
  }
  bool over(int64_t slack) const { return policy_ && length_ > budget_tokens() + slack; }
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  int64_t budget_tokens() const {
    if (policy_->budget_ratio > 0.0) {
      return static_cast<int64_t>(std::ceil(policy_->budget_ratio * static_cast<double>(seen_)));
    }
    return policy_->budget_tokens > 0 ? policy_->budget_tokens : INT64_MAX / 2;
  }
  void note() {
    size_t bytes;
    if (g_.layout == KVC_LAYOUT_PAGED) {
      int64_t blocks = (length_ + g_.block_tokens - 1) / g_.block_tokens;
      bytes = static_cast<size_t>(blocks) * g_.bytes_for(g_.block_tokens);
    } else {
      // Contiguous segments keep their capacity after compaction and grow by the factor.
      if (length_ > capacity_) {
        int64_t grown = static_cast<int64_t>(std::ceil(static_cast<double>(capacity_) * g_.growth_factor));
        int64_t old_capacity = capacity_;
        capacity_ = std::max<int64_t>({length_, grown, 16});
        // Both segments exist while the old one is copied.
        peak_bytes_ = std::max(peak_bytes_, g_.bytes_for(static_cast<int32_t>(old_capacity)) +
                                                g_.bytes_for(static_cast<int32_t>(capacity_)));
      }
      bytes = g_.bytes_for(static_cast<int32_t>(capacity_));
    }
    peak_bytes_ = std::max(peak_bytes_, bytes);
  }

  const PolicyConfig* policy_;
  const Geometry& g_;
  int64_t length_ = 0;
  int64_t seen_ = 0;
  int64_t capacity_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace

size_t Cache::estimate_peak_bytes(int32_t prompt_tokens, int32_t chunk_tokens,
                                  int32_t new_tokens) const {
  if (prompt_tokens < 0 || new_tokens < 0) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "prompt_tokens and new_tokens must be >= 0");
  }
  if (chunk_tokens < 1) throw Error(KVC_ERR_INVALID_ARGUMENT, "chunk_tokens must be >= 1");
  const PolicyConfig* policy = policy_ ? &policy_->config() : nullptr;
  LengthSimulation head(policy, geometry_);
  for (int32_t done = 0; done < prompt_tokens; done += chunk_tokens) {
    int32_t chunk = std::min(chunk_tokens, prompt_tokens - done);
    head.add(chunk);
    if (policy && chunk > 1 && policy->prefill == PrefillCompression::per_chunk) head.compress();
  }
  if (policy && policy->prefill == PrefillCompression::once && new_tokens > 0) head.compress();
  int32_t steps_since_compression = 0;
  for (int32_t step = 1; step <= new_tokens; ++step) {
    head.add(1);
    ++steps_since_compression;
    bool every = policy && policy->decode_every > 0 && steps_since_compression >= policy->decode_every;
    bool slack = policy && policy->decode_slack > 0 && head.over(policy->decode_slack);
    if (every || slack) {
      head.compress();
      steps_since_compression = 0;
    }
  }
  return head.peak_bytes() * static_cast<size_t>(config_.layers) * static_cast<size_t>(config_.kv_heads);
}

}  // namespace kvc
