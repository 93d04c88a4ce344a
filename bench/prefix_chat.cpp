// kvc-bench prefix, scenario 2: a chat whose every turn extends the conversation so far.
//
// The replies are teacher-forced (the text's tokens, not the model's choice), so both modes
// serve the same conversation. Their logits are not compared: without the prefix cache a turn
// recomputes the earlier replies' K/V in prefill chunks, where the cached K/V came from
// one-token decode steps, and matrix products of another shape may round differently.
#if defined(KVC_BENCH_HAVE_LLAMA)

#include <vector>

#include "prefix.hpp"
#include "timer.hpp"

namespace kvc_bench {
namespace prefix {

ChatResult chat(const Run& run, const Prompts& prompts, bool prefix_cache) {
  const Config& cfg = *run.cfg;
  Engine engine(run, prefix_cache, cfg.chunk_tokens);
  ChatResult r;
  const int32_t seq = 0;
  std::vector<int32_t> prompt;  // the conversation so far, then this turn's user text
  Timer total;
  for (int32_t t = 0; t < cfg.turns; ++t) {
    const std::vector<int32_t>& user = prompts.turns[static_cast<size_t>(t)];
    const std::vector<int32_t>& reply = prompts.replies[static_cast<size_t>(t)];
    prompt.insert(prompt.end(), user.begin(), user.end());
    const int32_t prompt_len = static_cast<int32_t>(prompt.size());

    Timer arrival;
    const int32_t from = engine.start(seq, prompt);
    r.start_s += arrival.seconds();
    engine.prefill(seq, prompt, from);
    const int32_t first = argmax(engine.logits(), run.vocab);  // as a server would pick it
    clobber_memory(&first);
    const double ttft = arrival.seconds();
    r.ttft.s.push_back(ttft);
    r.turn_prefill_tokens.push_back(prompt_len - from);
    r.prefill_tokens += prompt_len - from;

    // The reply's tokens but its last are fed back; the cache then holds them after the prompt.
    for (int32_t s = 0; s + 1 < cfg.reply_tokens; ++s) {
      const int32_t token = reply[static_cast<size_t>(s)];
      const int32_t position = prompt_len + s;
      engine.decode(1, &seq, &token, &position);
    }
    prompt.insert(prompt.end(), reply.begin(), reply.end());
    if (prefix_cache) engine.publish(seq, prompt.data(), prompt_len + cfg.reply_tokens - 1);
    engine.remove(seq);
  }
  r.total_s = total.seconds();
  return r;
}

}  // namespace prefix
}  // namespace kvc_bench

#endif  // KVC_BENCH_HAVE_LLAMA
