// The rules that decide how much a (sequence, layer, KV head) keeps and when it compresses or
// grows. The cache runs them on its heads and the peak estimator on a model of one, so an
// estimate cannot drift from what the cache does.
#pragma once

#include <algorithm>
#include <cstdint>

#include "config.hpp"

namespace kvc {

// Tokens [0, sink_end) and [recent_begin, n) are kept whatever their score.
struct ProtectedRange {
  int32_t sink_end;
  int32_t recent_begin;
  int32_t count(int32_t n) const { return sink_end + (n - recent_begin); }
};

// Per (sequence, layer): what the automatic triggers remember between calls.
struct TriggerState {
  int32_t decode_steps = 0;      // single-token steps since the last compression
  bool prefill_pending = false;  // a prompt chunk awaits the "once" compression
};

class Schedule {
 public:
  // policy NULL: never compresses. The policy's sinks and recent must be resolved (>= 0).
  Schedule(const PolicyConfig* policy, double growth_factor);

  bool compresses() const { return policy_ != nullptr; }

  // ---- budgets
  // The configured budget of a head that has seen `seen` tokens (tokens, or a ratio of them);
  // INT32_MAX when unbounded.
  int32_t configured_budget(int64_t seen) const;
  // The budget a head is held to: the configured one, capped by the one its policy gave it at
  // its last compression (effective < 0: none yet).
  int32_t budget(int64_t seen, int32_t effective) const;
  // The sinks and recent tokens of n that compression always keeps.
  ProtectedRange protected_range(int32_t n) const;
  // How many of n tokens a compression to `budget` keeps.
  int32_t kept(int32_t n, int32_t budget) const;

  // ---- triggers
  // Before storing n_tokens (`prompt_end`: marked as the prompt's last chunk): whether the
  // "once" compression runs now (the first decode token after a prompt). The caller clears
  // prefill_pending once that compression succeeded.
  bool before_append(const TriggerState& state, int32_t n_tokens, bool prompt_end) const;
  // After attending n_tokens (`prompt_end`: the engine marked them as its prompt's last
  // chunk): whether to compress now; updates the state. `excess()` is the most tokens any head
  // of the layer holds beyond its budget (asked only for decode_slack).
  template <class Excess>
  bool after_attend(TriggerState& state, int32_t n_tokens, bool prompt_end, Excess&& excess) const {
    if (!policy_) return false;
    bool now = false;
    if (n_tokens > 1 || prompt_end) {
      const bool once = policy_->prefill == PrefillCompression::once;
      state.prefill_pending = once && !prompt_end;
      now = policy_->prefill == PrefillCompression::per_chunk || (once && prompt_end);
    } else {
      ++state.decode_steps;
      now = (policy_->decode_every > 0 && state.decode_steps >= policy_->decode_every) ||
            (policy_->decode_slack > 0 && excess() > policy_->decode_slack);
    }
    if (now) state.decode_steps = 0;
    return now;
  }

  // How many of the next `limit` unmarked appends of n_tokens from `state` surely fire no trigger;
  // excess_after(j) is how many tokens the head holds beyond its budget after j more appends,
  // which must not decrease with j.
  template <class ExcessAfter>
  int64_t steps_without_trigger(const TriggerState& state, int32_t n_tokens, int64_t limit,
                                ExcessAfter&& excess_after) const {
    if (!policy_) return limit;
    if (n_tokens > 1) return policy_->prefill == PrefillCompression::per_chunk ? 0 : limit;
    if (before_append(state, n_tokens, false)) return 0;
    int64_t steps = limit;
    if (policy_->decode_every > 0) {
      steps = std::clamp<int64_t>(int64_t{policy_->decode_every} - 1 - state.decode_steps, 0, steps);
    }
    if (policy_->decode_slack > 0) {
      // The most steps whose excess stays within the slack: galloping from 1, so a run that
      // ends within a few steps (a trigger every few tokens) costs a few probes, not log(limit).
      int64_t fits = 0, probe = 1;
      while (probe <= steps && excess_after(probe) <= policy_->decode_slack) {
        fits = probe;
        probe = probe > steps / 2 ? steps + 1 : probe * 2;
      }
      steps = std::min(steps, probe - 1);
      while (fits < steps) {
        const int64_t mid = fits + (steps - fits + 1) / 2;
        if (excess_after(mid) <= policy_->decode_slack) {
          fits = mid;
        } else {
          steps = mid - 1;
        }
      }
    }
    return steps;
  }
  // What after_attend does to the state over `steps` unmarked appends of n_tokens that fire
  // nothing.
  void skip_steps(TriggerState& state, int32_t n_tokens, int64_t steps) const;
  // Whether the budget depends on the tokens a head has seen (a ratio).
  bool budget_grows() const { return policy_ && policy_->budget_ratio > 0.0; }

  // ---- growth
  // The capacity a contiguous array of `current` tokens grows to so that `needed` fit: by
  // the growth factor (at least kMinCapacity), or exactly `needed` when `exact`; 0 when
  // they already fit.
  int32_t grown_capacity(int32_t current, int64_t needed, bool exact) const;
  // The capacity an array of `capacity` holding `length` tokens shrinks to once compaction or
  // truncation left it at most 1 / factor^2 full (length * factor, at least kMinCapacity), or
  // 0 to keep it: a shrunk array is 1 / factor full, one growth away from its old size.
  int32_t shrunk_capacity(int32_t capacity, int32_t length) const;

 private:
  // The smallest first allocation, so that one-token appends do not start with a run of
  // tiny re-allocations.
  static constexpr int32_t kMinCapacity = 16;

  const PolicyConfig* policy_;
  double growth_factor_;
};

}  // namespace kvc
