// kvc-bench prefix: one cache, with or without the prefix cache, and the example engine's
// steps over it.
#if defined(KVC_BENCH_HAVE_LLAMA)

#include <algorithm>
#include <string>
#include <vector>

#include "prefix.hpp"

namespace kvc_bench {
namespace prefix {

namespace {

CachePtr make_cache(const Run& run, bool prefix_cache) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  kvl_cache_params_for(run.model, &p);
  run.cfg->formats.apply(&p);
  p.layout = KVC_LAYOUT_PAGED;
  p.block_tokens = run.cfg->block_tokens;
  p.memory_limit = run.memory_limit;
  p.prefix_cache = prefix_cache ? 1 : 0;
  kvc_cache* raw = nullptr;
  check(kvc_cache_create(run.ctx, &p, &raw),
        prefix_cache ? "kvc_cache_create (prefix cache on)" : "kvc_cache_create (prefix cache off)");
  return CachePtr(raw);
}

}  // namespace

Engine::Engine(const Run& run, bool prefix_cache, int32_t max_tokens)
    : run_(run), prefix_cache_(prefix_cache), cache_(make_cache(run, prefix_cache)) {
  kvl_engine* raw = nullptr;
  char err[1024] = {0};
  if (kvl_engine_create(run.model, cache_.get(), max_tokens, &raw, err, sizeof err) != 0) {
    throw Error(std::string("kvl_engine_create: ") + err);
  }
  engine_.reset(raw);
  positions_.resize(static_cast<size_t>(max_tokens));
  logits_.resize(static_cast<size_t>(max_tokens) * static_cast<size_t>(run.vocab));
}

namespace {

// The prompt less its last token, which is left to compute for its logits.
kvc_prefix prompt_prefix(const Run& run, const std::vector<int32_t>& prompt) {
  kvc_prefix pf;
  kvc_prefix_init(&pf, run.model_id.c_str(), prompt.data(),
                  static_cast<int32_t>(prompt.size()) - 1);
  return pf;
}

}  // namespace

int32_t Engine::start(int32_t seq, const std::vector<int32_t>& prompt) {
  if (!prefix_cache_) {
    check(kvc_seq_create(cache_.get(), seq), "kvc_seq_create");
    return 0;
  }
  const kvc_prefix pf = prompt_prefix(run_, prompt);
  int32_t attached = 0;
  check(kvc_prefix_attach(cache_.get(), seq, &pf, &attached), "kvc_prefix_attach");
  if (attached < 0 || attached >= static_cast<int32_t>(prompt.size())) {
    throw Error("kvc_prefix_attach attached " + std::to_string(attached) + " tokens of a " +
                std::to_string(prompt.size() - 1) + "-token prefix");
  }
  return attached;
}

int32_t Engine::lookup(const std::vector<int32_t>& prompt) {
  const kvc_prefix pf = prompt_prefix(run_, prompt);
  int32_t tokens = 0;
  check(kvc_prefix_lookup(cache_.get(), &pf, &tokens), "kvc_prefix_lookup");
  return tokens;
}

void Engine::prefill(int32_t seq, const std::vector<int32_t>& prompt, int32_t from) {
  const int32_t end = static_cast<int32_t>(prompt.size());
  const int32_t chunk = run_.cfg->chunk_tokens;
  for (int32_t begin = from; begin < end;) {
    const int32_t stop = std::min(end, (begin / chunk + 1) * chunk);
    const int32_t n = stop - begin;
    for (int32_t t = 0; t < n; ++t) positions_[static_cast<size_t>(t)] = begin + t;
    forward(1, &seq, &n, prompt.data() + begin, positions_.data(), "prefill");
    begin = stop;
  }
}

void Engine::decode(int32_t n, const int32_t* seqs, const int32_t* tokens,
                    const int32_t* positions) {
  ones_.resize(static_cast<size_t>(n), 1);
  forward(n, seqs, ones_.data(), tokens, positions, "decode");
}

int32_t Engine::publish(int32_t seq, const int32_t* tokens, int32_t n) {
  kvc_prefix pf;
  kvc_prefix_init(&pf, run_.model_id.c_str(), tokens, n);
  int32_t published = 0;
  check(kvc_prefix_publish(cache_.get(), seq, &pf, &published), "kvc_prefix_publish");
  return published;
}

void Engine::remove(int32_t seq) { check(kvc_seq_remove(cache_.get(), seq), "kvc_seq_remove"); }

kvc_cache_stats Engine::stats() const {
  kvc_cache_stats st;
  kvc_cache_stats_init(&st);
  check(kvc_cache_get_stats(cache_.get(), &st), "kvc_cache_get_stats");
  return st;
}

void Engine::forward(int32_t n, const int32_t* seqs, const int32_t* n_tokens,
                     const int32_t* tokens, const int32_t* positions, const char* phase) {
  char err[1024] = {0};
  if (kvl_engine_forward(engine_.get(), n, seqs, n_tokens, tokens, positions, 0, logits_.data(),
                         err, sizeof err) != 0) {
    throw Error(std::string("kvl_engine_forward (") + phase + ", prefix cache " +
                (prefix_cache_ ? "on" : "off") + "): " + err);
  }
}

size_t sequence_estimate(const Run& run, int32_t prompt_tokens, int32_t new_tokens) {
  const CachePtr probe = make_cache(run, false);
  kvc_estimate_request request;
  kvc_estimate_request_init(&request, prompt_tokens, run.cfg->chunk_tokens, new_tokens);
  size_t bytes = 0;
  check(kvc_cache_estimate(probe.get(), &request, &bytes), "kvc_cache_estimate");
  return bytes;
}

void warm_up(const Run& run, const Prompts& prompts) {
  Engine engine(run, false, run.cfg->chunk_tokens);
  const int32_t len = static_cast<int32_t>(prompts.system.size());
  const std::vector<int32_t>& chunk = prompts.system;
  const int32_t seq = 0;
  engine.start(seq, chunk);
  engine.prefill(seq, chunk, 0);
  for (int32_t s = 0; s < 8; ++s) {
    const int32_t token = argmax(engine.logits(), run.vocab);
    const int32_t position = len + s;
    engine.decode(1, &seq, &token, &position);
  }
}

}  // namespace prefix
}  // namespace kvc_bench

#endif  // KVC_BENCH_HAVE_LLAMA
