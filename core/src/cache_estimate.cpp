// Peak storage of one sequence under the configured policy: a model of one (layer, KV head)
// driven through the cache's own Schedule. Runs of appends that fire no trigger and grow
// nothing are taken in one step, and a run whose state comes back is skipped by whole
// periods, so the time is bounded whatever the token counts.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cache.hpp"
#include "kvcache/kvcache_error.hpp"
#include "selection.hpp"

namespace kvc {
namespace {

// The most appends the model takes one at a time before it gives up (milliseconds, far more under
// ASan + UBSan): a ratio budget with a small decode_slack, compressing every few tokens, needs
// more past about 200 thousand tokens, and so does a contiguous array past
// INT32_MAX / growth_factor tokens, which grows on every append.
constexpr int64_t kMaxModelledAppends = int64_t{1} << 16;

// What decides a head's future, apart from the peak so far.
struct HeadState {
  int64_t length;
  int64_t demoted;
  int64_t seen;  // 0 unless the budget grows with it
  int32_t capacity;
  int32_t stats_capacity;
  int32_t decode_steps;
  bool prefill_pending;

  bool operator==(const HeadState& o) const {
    return length == o.length && demoted == o.demoted && seen == o.seen && capacity == o.capacity &&
           stats_capacity == o.stats_capacity && decode_steps == o.decode_steps &&
           prefill_pending == o.prefill_pending;
  }
};

// Brent's cycle detection over the states after each modelled append: O(1) memory, and a
// cycle is found within about twice its start plus its length.
class CycleFinder {
 public:
  // The period, in appends, when `state` (with `left` appends to go) was seen before.
  int64_t period(const HeadState& state, int64_t left) {
    if (has_anchor_ && anchor_ == state) return anchor_left_ - left;
    if (++since_anchor_ >= window_) {
      anchor_ = state;
      anchor_left_ = left;
      has_anchor_ = true;
      since_anchor_ = 0;
      window_ *= 2;
    }
    return 0;
  }

 private:
  HeadState anchor_{};
  int64_t anchor_left_ = 0;
  bool has_anchor_ = false;
  int64_t since_anchor_ = 0;
  int64_t window_ = 1;
};

// The tokens and capacities of one (layer, KV head) of a sequence over a request. Layers
// append a step's tokens one after another, so while one layer holds its step's peak, the
// others hold what they held before or after that step.
class HeadModel {
 public:
  // `keep`: policy.demote's share, when the geometry demotes.
  HeadModel(const Schedule& schedule, const Geometry& g, int32_t layers, double keep)
      : schedule_(schedule), g_(g), layers_(layers), keep_(keep) {}

  // One append of `tokens` that the engine marks as the prompt's last chunk.
  void append_prompt_end(int32_t tokens) {
    bump_modelled();
    append(tokens, true);
  }
  // `count` unmarked appends of `tokens` each.
  void append_repeated(int32_t tokens, int64_t count) {
    CycleFinder cycle;
    while (count > 0) {
      const int64_t quiet = quiet_steps(tokens, count);
      if (quiet > 0) {
        skip_quiet(tokens, quiet);
        count -= quiet;
        continue;
      }
      bump_modelled();
      append(tokens, false);
      --count;
      // A state that comes back repeats everything in between, peaks included.
      if (const int64_t period = cycle.period(state(), count)) {
        const int64_t skipped = count / period * period;
        seen_ += skipped * tokens;
        count -= skipped;
        cycle = CycleFinder{};
      }
    }
  }
  // Bytes of all layers of one KV head at the worst moment.
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  void bump_modelled() {
    if (++modelled_ > kMaxModelledAppends) {
      throw Error(KVC_ERR_INVALID_ARGUMENT,
                  "the estimate needs more than " + std::to_string(kMaxModelledAppends) +
                      " compressions modelled one by one; ask for fewer tokens");
    }
  }
  void append(int32_t tokens, bool prompt_end) {
    const size_t before = held_bytes();
    size_t peak = 0;
    if (schedule_.before_append(triggers_, tokens, prompt_end)) {
      peak = compress();
      triggers_.prefill_pending = false;
    }
    const size_t grown = grow(tokens);
    peak = std::max(peak, grown);
    length_ += tokens;
    seen_ += tokens;
    if (schedule_.after_attend(triggers_, tokens, prompt_end, [&] { return excess(); })) {
      // What the growth replaced is given back only after the attention's compression, whose
      // rewrite (with demotion) takes new blocks meanwhile.
      const size_t replaced = g_.demotes() ? grown - held_bytes() : 0;
      peak = std::max(peak, compress() + replaced);
    }
    const size_t after = held_bytes();
    peak_bytes_ = std::max(peak_bytes_, peak + static_cast<size_t>(layers_ - 1) * std::max(before, after));
  }
  int64_t excess() const { return excess_after(0); }
  // Compressor::excess of the head after `extra` more tokens of the cache's formats, `seen`
  // tokens in all.
  int64_t excess_after(int64_t extra, int64_t seen) const {
    const int64_t budget = schedule_.budget(seen, -1);
    if (!g_.demotes()) return length_ + extra - budget;
    const auto keep_cost = static_cast<int64_t>(g_.budget_token_bytes(0));
    const int64_t over = (length_ + extra - demoted_) * keep_cost +
                         demoted_ * static_cast<int64_t>(g_.budget_token_bytes(1)) - budget * keep_cost;
    return over > 0 ? (over + keep_cost - 1) / keep_cost : over / keep_cost;
  }
  int64_t excess_after(int64_t extra) const { return excess_after(extra, seen_); }
  // How many of the next `limit` appends of `tokens` fire no trigger and grow no array.
  int64_t quiet_steps(int32_t tokens, int64_t limit) const {
    int64_t steps = schedule_.steps_without_trigger(triggers_, tokens, limit, [&](int64_t j) {
      return excess_after(j * tokens, seen_ + j * tokens);
    });
    if (g_.layout == KVC_LAYOUT_CONTIGUOUS) steps = std::min(steps, (capacity_ - length_) / tokens);
    if (g_.stat_count() > 0) steps = std::min(steps, (stats_capacity_ - length_) / tokens);
    return steps;
  }
  // Such appends only add tokens, so each holds more than the one before: the last one's
  // bytes, on every layer, are their peak.
  void skip_quiet(int32_t tokens, int64_t steps) {
    schedule_.skip_steps(triggers_, tokens, steps);
    length_ += steps * tokens;
    seen_ += steps * tokens;
    peak_bytes_ = std::max(peak_bytes_, static_cast<size_t>(layers_) * held_bytes());
  }
  HeadState state() const {
    return HeadState{length_, demoted_, schedule_.budget_grows() ? seen_ : 0, capacity_, stats_capacity_,
                     triggers_.decode_steps, triggers_.prefill_pending};
  }
  // Compresses as the cache does, then shrinks what the compaction left mostly empty; returns
  // the bytes held at the peak (old and new arrays together while a shrink copies).
  size_t compress() {
    if (g_.demotes()) return compress_demoting();
    const int32_t kept = schedule_.kept(static_cast<int32_t>(length_), schedule_.budget(seen_, -1));
    if (kept == length_) return held_bytes();
    length_ = kept;
    size_t transient = 0;
    if (g_.layout == KVC_LAYOUT_CONTIGUOUS) {
      if (int32_t shrunk = schedule_.shrunk_capacity(capacity_, kept)) {
        transient += g_.bytes_for(capacity_);
        capacity_ = shrunk;
      }
    }
    if (g_.stat_count() > 0) {
      if (int32_t shrunk = schedule_.shrunk_capacity(stats_capacity_, kept)) {
        transient += g_.stats_bytes_for(stats_capacity_);
        stats_capacity_ = shrunk;
      }
    }
    return held_bytes() + transient;
  }
  // With policy.demote: the head is rewritten into new blocks while the old ones are held.
  size_t compress_demoting() {
    const size_t before = held_bytes();
    const TierCosts costs{g_.budget_token_bytes(0), g_.budget_token_bytes(1)};
    const size_t budget = static_cast<size_t>(schedule_.budget(seen_, -1)) * costs.keep;
    const int32_t n = static_cast<int32_t>(length_);
    const TierCounts counts =
        modelled_tiers(length_, demoted_, schedule_.protected_range(n).count(n), budget,
                       keep_share_bytes(keep_, budget), costs);
    if (counts.kept + counts.demoted == length_ && counts.demoted == demoted_) return before;
    length_ = counts.kept + counts.demoted;
    demoted_ = counts.demoted;
    return before + held_bytes();
  }
  // Paged: whole blocks of each tier. Contiguous: the capacity, which compaction keeps. Plus
  // statistics.
  size_t held_bytes() const {
    size_t kv = g_.bytes_for(capacity_);
    if (g_.layout == KVC_LAYOUT_PAGED) {
      int64_t blocks = (length_ - demoted_ + g_.block_tokens - 1) / g_.block_tokens;
      if (demoted_ > 0) blocks += (demoted_ + g_.demoted_block_tokens - 1) / g_.demoted_block_tokens;
      kv = static_cast<size_t>(blocks) * g_.bytes_for(g_.block_tokens);
    }
    return kv + g_.stats_bytes_for(stats_capacity_);
  }
  // Grows as the cache does for `tokens` more; returns the bytes held at the peak (old and
  // new arrays together while a copy runs).
  size_t grow(int32_t tokens) {
    const int64_t needed = length_ + tokens;
    size_t transient = 0;
    if (g_.layout == KVC_LAYOUT_CONTIGUOUS) {
      if (int32_t grown = schedule_.grown_capacity(capacity_, needed, false)) {
        transient += g_.bytes_for(capacity_);
        capacity_ = grown;
      }
    }
    if (g_.stat_count() > 0) {
      if (int32_t grown = schedule_.grown_capacity(stats_capacity_, needed, false)) {
        transient += g_.stats_bytes_for(stats_capacity_);
        stats_capacity_ = grown;
      }
    }
    const int64_t saved_length = length_;
    length_ = needed;
    const size_t held = held_bytes();
    length_ = saved_length;
    return held + transient;
  }

  const Schedule& schedule_;
  const Geometry& g_;
  const int32_t layers_;
  TriggerState triggers_;
  const double keep_;
  int64_t length_ = 0;
  int64_t demoted_ = 0;  // of length_, in the demoted tier
  int64_t seen_ = 0;
  int32_t capacity_ = 0;
  int32_t stats_capacity_ = 0;
  size_t peak_bytes_ = 0;
  int64_t modelled_ = 0;
};

}  // namespace

size_t Cache::estimate_peak_bytes(int32_t prompt_tokens, int32_t chunk_tokens, int32_t new_tokens,
                                  bool marks_prompt_end) const {
  if (prompt_tokens < 0 || new_tokens < 0) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "prompt_tokens and new_tokens must be >= 0");
  }
  if (chunk_tokens < 1) throw Error(KVC_ERR_INVALID_ARGUMENT, "chunk_tokens must be >= 1");
  if (int64_t{prompt_tokens} + new_tokens > INT32_MAX) {
    throw Error(KVC_ERR_INVALID_ARGUMENT,
                "prompt_tokens + new_tokens must be at most 2147483647 (a sequence's positions), got " +
                    std::to_string(int64_t{prompt_tokens} + new_tokens));
  }
  HeadModel head(schedule_, geometry_, config_.layers,
                 policy_ ? policy_->config().demote.keep : 0.0);
  const int32_t rest = prompt_tokens % chunk_tokens;
  const int64_t chunks = prompt_tokens / chunk_tokens;
  if (!marks_prompt_end || prompt_tokens == 0) {
    head.append_repeated(chunk_tokens, chunks);
    if (rest) head.append_repeated(rest, 1);
  } else if (rest) {
    head.append_repeated(chunk_tokens, chunks);
    head.append_prompt_end(rest);
  } else {
    head.append_repeated(chunk_tokens, chunks - 1);
    head.append_prompt_end(chunk_tokens);
  }
  head.append_repeated(1, new_tokens);
  size_t bytes = 0;
  if (__builtin_mul_overflow(head.peak_bytes(), static_cast<size_t>(config_.kv_heads), &bytes)) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "the peak bytes do not fit in a size_t");
  }
  return bytes;
}

}  // namespace kvc
