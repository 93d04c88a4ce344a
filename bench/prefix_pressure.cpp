// kvc-bench prefix, scenario 3: the prefix cache under a memory limit smaller than the blocks
// its requests publish.
//
// Requests arrive one at a time; request i uses system prompt ((i / 4) + i % 3) % P of P
// random prompts, so the prompts in use drift and the recently used ones recur, followed by a
// question of one block of its own. Each is attached, prefilled from there, decoded for a few
// tokens, published (prompt and question) and removed. The cache's limit holds one request
// and about --pressure_cached system prompts, so it keeps reclaiming cached blocks: no request
// may fail, and at the end the most recently used prompts must still be found whole.
#if defined(KVC_BENCH_HAVE_LLAMA)

#include <algorithm>
#include <vector>

#include "batchmax.hpp"
#include "prefix.hpp"

namespace kvc_bench {
namespace prefix {

namespace {

constexpr int32_t kNewTokens = 4;

int32_t prompt_of_request(int32_t i, int32_t prompts) { return ((i / 4) + i % 3) % prompts; }

}  // namespace

PressureResult pressure(const Run& run) {
  const Config& cfg = *run.cfg;
  const int32_t system_tokens = cfg.pressure_prefix_tokens;
  const int32_t question_tokens = cfg.block_tokens;
  const int32_t prompt_len = system_tokens + question_tokens;
  const std::vector<std::vector<int32_t>> systems =
      batchmax::random_requests(cfg.pressure_prompts, system_tokens, run.vocab, cfg.seed + 1)
          .prompts;
  const std::vector<std::vector<int32_t>> questions =
      batchmax::random_requests(cfg.pressure_requests, question_tokens, run.vocab, cfg.seed + 2)
          .prompts;

  Run limited = run;
  limited.memory_limit = sequence_estimate(run, prompt_len, kNewTokens) +
                         static_cast<size_t>(cfg.pressure_cached) *
                             sequence_estimate(run, system_tokens, 0);
  Engine engine(limited, true, cfg.chunk_tokens);
  PressureResult r;
  r.bytes_limit = limited.memory_limit;
  r.prompt_tokens = system_tokens;
  std::vector<int32_t> recency;  // prompt indices, most recently used first
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int32_t i = 0; i < cfg.pressure_requests; ++i) {
    const int32_t p = prompt_of_request(i, cfg.pressure_prompts);
    const std::vector<int32_t>& system = systems[static_cast<size_t>(p)];
    const std::vector<int32_t>& question = questions[static_cast<size_t>(i)];
    std::copy(system.begin(), system.end(), prompt.begin());
    std::copy(question.begin(), question.end(), prompt.begin() + system_tokens);
    recency.erase(std::remove(recency.begin(), recency.end(), p), recency.end());
    recency.insert(recency.begin(), p);
    ++r.requests;
    try {
      const int32_t from = engine.start(i, prompt);
      try {
        engine.prefill(i, prompt, from);
        for (int32_t s = 0; s < kNewTokens; ++s) {
          const int32_t token = argmax(engine.logits(), run.vocab);
          const int32_t position = prompt_len + s;
          engine.decode(1, &i, &token, &position);
        }
        engine.publish(i, prompt.data(), prompt_len);
      } catch (const Error&) {
        engine.remove(i);
        throw;
      }
      engine.remove(i);
    } catch (const Error& e) {
      ++r.failed;
      if (r.first_failure.empty()) r.first_failure = e.what();
    }
  }
  for (int32_t p : recency) {
    std::vector<int32_t> probe = systems[static_cast<size_t>(p)];
    probe.push_back(0);  // lookup() leaves the last token out
    r.found_by_recency.push_back(engine.lookup(probe));
  }
  const kvc_cache_stats st = engine.stats();
  r.prefix_hits = st.prefix_hits;
  r.tokens_reused = st.prefix_tokens_reused;
  r.bytes_reclaimed = st.bytes_reclaimed;
  r.bytes_peak = st.bytes_peak;
  r.bytes_cached = st.bytes_cached;
  return r;
}

}  // namespace prefix
}  // namespace kvc_bench

#endif  // KVC_BENCH_HAVE_LLAMA
