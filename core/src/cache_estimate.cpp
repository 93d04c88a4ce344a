// Peak storage of one sequence under the configured policy, simulated step by step.
#include <algorithm>
#include <cmath>

#include "cache.hpp"
#include "error.hpp"

namespace kvc {
namespace {

// When one store of tokens compresses: not at all, before storing (the "once" mode at the
// first decode token), after attending (per-chunk prefill), or as decoding triggers say.
enum class Trigger { none, before, after, decode };

// The tokens every (layer, KV head) of one sequence holds over a request. Layers store a
// step's tokens one after another, so while one layer holds its step's peak, the others hold
// what they held before or after that step.
class Simulation {
 public:
  Simulation(const PolicyConfig* policy, const Geometry& g, int32_t layers)
      : policy_(policy), g_(g), layers_(layers) {}

  void store(int32_t tokens, Trigger trigger) {
    const size_t before = held_bytes();
    if (trigger == Trigger::before) compress();
    length_ += tokens;
    seen_ += tokens;
    const size_t peak = grow();
    ++steps_since_compression_;
    if (trigger == Trigger::after || (trigger == Trigger::decode && decode_due())) compress();
    const size_t after = held_bytes();
    peak_bytes_ = std::max(peak_bytes_, peak + static_cast<size_t>(layers_ - 1) * std::max(before, after));
  }
  // Bytes of all layers of one KV head at the worst moment.
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  void compress() {
    steps_since_compression_ = 0;
    if (!policy_) return;
    int64_t protected_tokens = std::min<int64_t>(length_, int64_t{policy_->sinks} + policy_->recent);
    length_ = std::min(length_, std::max(budget_tokens(), protected_tokens));
  }
  bool decode_due() const {
    if (!policy_) return false;
    bool every = policy_->decode_every > 0 && steps_since_compression_ >= policy_->decode_every;
    bool slack = policy_->decode_slack > 0 && length_ > budget_tokens() + policy_->decode_slack;
    return every || slack;
  }
  int64_t budget_tokens() const {
    if (policy_->budget_ratio > 0.0) {
      return static_cast<int64_t>(std::ceil(policy_->budget_ratio * static_cast<double>(seen_)));
    }
    return policy_->budget_tokens > 0 ? policy_->budget_tokens : INT64_MAX / 2;
  }
  size_t bytes_of(int64_t tokens) const { return g_.bytes_for(static_cast<int32_t>(tokens)); }
  // Paged: whole blocks. Contiguous: the capacity, which compaction keeps.
  size_t held_bytes() const {
    if (g_.layout == KVC_LAYOUT_CONTIGUOUS) return bytes_of(capacity_);
    int64_t blocks = (length_ + g_.block_tokens - 1) / g_.block_tokens;
    return static_cast<size_t>(blocks) * bytes_of(g_.block_tokens);
  }
  // Grows a contiguous segment as the cache does; returns the bytes held at the peak (old and
  // new segment together while the copy runs).
  size_t grow() {
    if (g_.layout != KVC_LAYOUT_CONTIGUOUS || length_ <= capacity_) return held_bytes();
    int64_t grown = static_cast<int64_t>(std::ceil(static_cast<double>(capacity_) * g_.growth_factor));
    int64_t old_capacity = capacity_;
    capacity_ = std::max<int64_t>({length_, grown, 16});
    return bytes_of(old_capacity) + bytes_of(capacity_);
  }

  const PolicyConfig* policy_;
  const Geometry& g_;
  const int32_t layers_;
  int64_t length_ = 0;
  int64_t seen_ = 0;
  int64_t capacity_ = 0;
  int32_t steps_since_compression_ = 0;
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
  const PrefillCompression prefill = policy ? policy->prefill : PrefillCompression::none;
  Simulation sequence(policy, geometry_, config_.layers);
  for (int32_t done = 0; done < prompt_tokens; done += chunk_tokens) {
    int32_t chunk = std::min(chunk_tokens, prompt_tokens - done);
    bool per_chunk = prefill == PrefillCompression::per_chunk && chunk > 1;
    sequence.store(chunk, per_chunk ? Trigger::after : Trigger::none);
  }
  for (int32_t step = 0; step < new_tokens; ++step) {
    bool once = step == 0 && prompt_tokens > 1 && prefill == PrefillCompression::once;
    sequence.store(1, once ? Trigger::before : Trigger::decode);
  }
  return sequence.peak_bytes() * static_cast<size_t>(config_.kv_heads);
}

}  // namespace kvc
