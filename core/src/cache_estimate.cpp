// Peak storage of one sequence under the configured policy: a model of one (layer, KV head)
// driven step by step through the cache's own Schedule.
#include <algorithm>

#include "cache.hpp"
#include "error.hpp"

namespace kvc {
namespace {

// The tokens and capacities of one (layer, KV head) of a sequence over a request. Layers
// store a step's tokens one after another, so while one layer holds its step's peak, the
// others hold what they held before or after that step.
class HeadModel {
 public:
  HeadModel(const Schedule& schedule, const Geometry& g, int32_t layers)
      : schedule_(schedule), g_(g), layers_(layers) {}

  void store(int32_t tokens) {
    const size_t before = held_bytes();
    size_t peak = 0;
    if (schedule_.before_store(triggers_, tokens)) {
      peak = compress();
      triggers_.prefill_pending = false;
    }
    peak = std::max(peak, grow(tokens));
    length_ += tokens;
    seen_ += tokens;
    auto excess = [&] { return length_ - int64_t{schedule_.budget(seen_, -1)}; };
    if (schedule_.after_attend(triggers_, tokens, excess)) peak = std::max(peak, compress());
    const size_t after = held_bytes();
    peak_bytes_ = std::max(peak_bytes_, peak + static_cast<size_t>(layers_ - 1) * std::max(before, after));
  }
  // Bytes of all layers of one KV head at the worst moment.
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  // Compresses as the cache does, then shrinks what the compaction left mostly empty; returns
  // the bytes held at the peak (old and new arrays together while a shrink copies).
  size_t compress() {
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
  // Paged: whole blocks. Contiguous: the capacity, which compaction keeps. Plus statistics.
  size_t held_bytes() const {
    size_t kv = g_.bytes_for(capacity_);
    if (g_.layout == KVC_LAYOUT_PAGED) {
      int64_t blocks = (length_ + g_.block_tokens - 1) / g_.block_tokens;
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
  int64_t length_ = 0;
  int64_t seen_ = 0;
  int32_t capacity_ = 0;
  int32_t stats_capacity_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace

size_t Cache::estimate_peak_bytes(int32_t prompt_tokens, int32_t chunk_tokens,
                                  int32_t new_tokens) const {
  if (prompt_tokens < 0 || new_tokens < 0) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "prompt_tokens and new_tokens must be >= 0");
  }
  if (chunk_tokens < 1) throw Error(KVC_ERR_INVALID_ARGUMENT, "chunk_tokens must be >= 1");
  HeadModel head(schedule_, geometry_, config_.layers);
  for (int32_t done = 0; done < prompt_tokens; done += chunk_tokens) {
    head.store(std::min(chunk_tokens, prompt_tokens - done));
  }
  for (int32_t step = 0; step < new_tokens; ++step) head.store(1);
  return head.peak_bytes() * static_cast<size_t>(config_.kv_heads);
}

}  // namespace kvc
