// kvc-bench prefix: the system prompt, questions and chat turns, cut from one token stream.
#if defined(KVC_BENCH_HAVE_LLAMA)

#include <string>
#include <vector>

#include "batchmax.hpp"
#include "prefix.hpp"

namespace kvc_bench {
namespace prefix {

Prompts make_prompts(const Config& cfg, const kvl_model* model, const kvl_tokenizer* tokenizer) {
  const int32_t bos = kvl_model_bos(model);
  const int32_t vocab = kvl_model_config(model)->vocab_size;
  // After the system prompt: the questions, then the chat, whose first turn starts with BOS.
  const int64_t rest64 = int64_t{cfg.requests} * cfg.question_tokens +
                         int64_t{cfg.turns} * (cfg.turn_tokens + cfg.reply_tokens) -
                         (bos >= 0 ? 1 : 0);
  if (cfg.prefix_tokens + rest64 > (int64_t{1} << 30)) {
    throw UsageError("the prompts of these options need more than 2^30 tokens");
  }
  const int32_t rest_tokens = static_cast<int32_t>(rest64);

  // The system prompt comes as batchmax's one prompt, the rest as its continuation.
  std::string source;
  batchmax::Requests stream;
  if (cfg.model_path.empty()) {
    stream = batchmax::random_requests(1, cfg.prefix_tokens + rest_tokens, vocab, cfg.seed);
    stream.continuations.emplace_back(stream.prompts[0].begin() + cfg.prefix_tokens,
                                      stream.prompts[0].end());
    stream.prompts[0].resize(static_cast<size_t>(cfg.prefix_tokens));
    source = "random tokens (seed " + std::to_string(cfg.seed) + ")";
  } else if (!cfg.ids_path.empty()) {
    stream = batchmax::token_id_requests(cfg.ids_path, vocab, bos, 1, cfg.prefix_tokens,
                                         rest_tokens);
    source = "token ids " + cfg.ids_path;
  } else {
    stream = batchmax::text_requests(tokenizer, bos, cfg.text_path, 1, cfg.prefix_tokens,
                                     rest_tokens);
    source = "text " + cfg.text_path;
  }

  Prompts p;
  p.system = std::move(stream.prompts[0]);
  const std::vector<int32_t>& rest = stream.continuations[0];
  size_t at = 0;
  auto take = [&](std::vector<int32_t>& out, int32_t n) {
    out.insert(out.end(), rest.begin() + static_cast<std::ptrdiff_t>(at),
               rest.begin() + static_cast<std::ptrdiff_t>(at) + n);
    at += static_cast<size_t>(n);
  };
  p.questions.resize(static_cast<size_t>(cfg.requests));
  for (std::vector<int32_t>& q : p.questions) take(q, cfg.question_tokens);
  p.turns.resize(static_cast<size_t>(cfg.turns));
  p.replies.resize(p.turns.size());
  for (size_t t = 0; t < p.turns.size(); ++t) {
    const bool starts_with_bos = t == 0 && bos >= 0;
    if (starts_with_bos) p.turns[t].push_back(bos);
    take(p.turns[t], cfg.turn_tokens - (starts_with_bos ? 1 : 0));
    take(p.replies[t], cfg.reply_tokens);
  }
  p.origin = source + ", consecutive windows: a system prompt of " +
             std::to_string(cfg.prefix_tokens) + " tokens" +
             (bos >= 0 ? " (BOS " + std::to_string(bos) + " first)" : " (no BOS)") + ", " +
             std::to_string(cfg.requests) + " questions of " +
             std::to_string(cfg.question_tokens) + ", " + std::to_string(cfg.turns) +
             " chat turns of " + std::to_string(cfg.turn_tokens) + " user and " +
             std::to_string(cfg.reply_tokens) + " teacher-forced reply tokens";
  return p;
}

}  // namespace prefix
}  // namespace kvc_bench

#endif  // KVC_BENCH_HAVE_LLAMA
