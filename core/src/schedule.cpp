#include "schedule.hpp"

#include <algorithm>
#include <cmath>

namespace kvc {

Schedule::Schedule(const PolicyConfig* policy, double growth_factor)
    : policy_(policy), growth_factor_(growth_factor) {}

int32_t Schedule::configured_budget(int64_t seen) const {
  if (!policy_) return INT32_MAX;
  if (policy_->budget_ratio > 0.0) {
    double tokens = std::ceil(policy_->budget_ratio * static_cast<double>(seen));
    return static_cast<int32_t>(std::min<double>(tokens, INT32_MAX));
  }
  return policy_->budget_tokens > 0 ? policy_->budget_tokens : INT32_MAX;
}

int32_t Schedule::budget(int64_t seen, int32_t effective) const {
  int32_t configured = configured_budget(seen);
  return effective >= 0 ? std::min(configured, effective) : configured;
}

ProtectedRange Schedule::protected_range(int32_t n) const {
  const int32_t sinks = policy_ ? policy_->sinks : 0;
  const int32_t recent = policy_ ? policy_->recent : 0;
  const int32_t length = std::max(n, 0);
  const int32_t sink_end = std::clamp(sinks, 0, length);
  const int32_t recent_begin = std::max(sink_end, length - std::clamp(recent, 0, length));
  return ProtectedRange{sink_end, recent_begin};
}

int32_t Schedule::kept(int32_t n, int32_t budget) const {
  if (n <= budget) return n;
  return std::max(protected_range(n).count(n), budget);
}

bool Schedule::before_append(const TriggerState& state, int32_t n_tokens, bool prompt_end) const {
  return policy_ && policy_->prefill == PrefillCompression::once && n_tokens == 1 &&
         !prompt_end && state.prefill_pending;
}

void Schedule::skip_steps(TriggerState& state, int32_t n_tokens, int64_t steps) const {
  if (!policy_ || steps == 0) return;
  if (n_tokens > 1) {
    state.prefill_pending = policy_->prefill == PrefillCompression::once;
  } else {
    state.decode_steps += static_cast<int32_t>(steps);
  }
}

int32_t Schedule::grown_capacity(int32_t current, int64_t needed, bool exact) const {
  if (needed <= current) return 0;
  if (exact) return static_cast<int32_t>(std::min<int64_t>(needed, INT32_MAX));
  double grown = std::ceil(static_cast<double>(current) * growth_factor_);
  int64_t target = std::max<int64_t>(needed, kMinCapacity);
  if (grown < static_cast<double>(INT32_MAX)) target = std::max(target, static_cast<int64_t>(grown));
  return static_cast<int32_t>(std::min<int64_t>(target, INT32_MAX));
}

int32_t Schedule::shrunk_capacity(int32_t capacity, int32_t length) const {
  if (capacity <= kMinCapacity) return 0;
  const double factor = growth_factor_;
  if (static_cast<double>(length) * factor * factor > static_cast<double>(capacity)) return 0;
  const double target = std::ceil(static_cast<double>(length) * factor);
  const int32_t shrunk = std::max(kMinCapacity, static_cast<int32_t>(target));
  return shrunk < capacity ? shrunk : 0;
}

}  // namespace kvc
