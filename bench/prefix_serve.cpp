// kvc-bench prefix, scenario 1: requests sharing a system prompt, served with every sequence
// live at once.
#if defined(KVC_BENCH_HAVE_LLAMA)

#include <algorithm>
#include <vector>

#include "prefix.hpp"
#include "timer.hpp"

namespace kvc_bench {
namespace prefix {

ServeResult serve(const Run& run, const Prompts& prompts, bool prefix_cache) {
  const Config& cfg = *run.cfg;
  const int32_t n = cfg.requests;
  const size_t vocab = static_cast<size_t>(run.vocab);
  Engine engine(run, prefix_cache, std::max(cfg.chunk_tokens, n));
  ServeResult r;
  r.logits.reserve(static_cast<size_t>(n) * static_cast<size_t>(cfg.new_tokens) * vocab);
  auto keep_logits = [&](int32_t rows) {
    r.logits.insert(r.logits.end(), engine.logits(), engine.logits() + rows * vocab);
  };

  std::vector<int32_t> seqs(static_cast<size_t>(n)), next(seqs.size()), positions(seqs.size());
  const int32_t prompt_len = cfg.prefix_tokens + cfg.question_tokens;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  Timer total;
  for (int32_t i = 0; i < n; ++i) {
    const size_t si = static_cast<size_t>(i);
    std::copy(prompts.system.begin(), prompts.system.end(), prompt.begin());
    std::copy(prompts.questions[si].begin(), prompts.questions[si].end(),
              prompt.begin() + cfg.prefix_tokens);
    seqs[si] = i;
    if (prefix_cache && i == 1) r.lookup_tokens = engine.lookup(prompt);
    Timer arrival;
    const int32_t from = engine.start(i, prompt);
    r.start_s += arrival.seconds();
    engine.prefill(i, prompt, from);
    next[si] = argmax(engine.logits(), run.vocab);
    const double ttft = arrival.seconds();
    keep_logits(1);
    r.ttft.s.push_back(ttft);
    r.prefill_s += ttft;
    r.attached_tokens += from;
    r.prefill_tokens += prompt_len - from;
    // Every prompt is published, as a server that cannot tell which prefixes will recur does;
    // after the first, only the question's blocks are new.
    if (prefix_cache) {
      Timer publish;
      r.published_tokens += engine.publish(i, prompt.data(), prompt_len);
      r.publish_s += publish.seconds();
    }
  }
  r.bytes_shared = engine.stats().bytes_shared;

  // The first new token came from each prefill; the others from batched steps over all.
  Timer decode;
  for (int32_t s = 0; s + 1 < cfg.new_tokens; ++s) {
    std::fill(positions.begin(), positions.end(), prompt_len + s);
    engine.decode(n, seqs.data(), next.data(), positions.data());
    keep_logits(n);
    for (size_t i = 0; i < seqs.size(); ++i) {
      next[i] = argmax(engine.logits() + i * vocab, run.vocab);
    }
  }
  r.decode_s = decode.seconds();
  r.total_s = total.seconds();
  r.generated = static_cast<int64_t>(n) * cfg.new_tokens;

  const kvc_cache_stats live = engine.stats();
  r.bytes_peak = live.bytes_peak;
  r.prefix_hits = live.prefix_hits;
  r.prefix_tokens_reused = live.prefix_tokens_reused;
  for (const int32_t seq : seqs) engine.remove(seq);
  const kvc_cache_stats after = engine.stats();
  r.bytes_cached = after.bytes_cached;
  r.bytes_reclaimed = after.bytes_reclaimed;
  return r;
}

}  // namespace prefix
}  // namespace kvc_bench

#endif  // KVC_BENCH_HAVE_LLAMA
