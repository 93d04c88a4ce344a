// kvc-bench prefix: the pieces shared by prefix.cpp (options, model, prompts, report),
// prefix_engine.cpp (one cache and its engine), prefix_serve.cpp (requests sharing a system
// prompt), prefix_chat.cpp (a chat whose turns extend each other) and prefix_pressure.cpp
// (requests under a memory limit smaller than their prefixes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kv_formats.hpp"
#include "llama_handles.hpp"
#include "llama_options.hpp"
#include "timer.hpp"

namespace kvc_bench {
namespace prefix {

/// The llama options (llama_options.hpp) and the scenarios'.
struct Config : LlamaOptions {
  int32_t requests = 16;
  int32_t prefix_tokens = 2048;  ///< the system prompt every request starts with
  int32_t question_tokens = 128; ///< each request's own text after it
  int32_t new_tokens = 64;       ///< tokens generated per request
  int32_t chunk_tokens = 128;    ///< prefill chunks end at multiples of this position
  int32_t turns = 4;             ///< chat turns
  int32_t turn_tokens = 256;     ///< user tokens each chat turn adds
  int32_t reply_tokens = 64;     ///< reply tokens each chat turn adds
  int32_t pressure_requests = 48;       ///< scenario 3's requests
  int32_t pressure_prompts = 8;         ///< its distinct system prompts
  int32_t pressure_prefix_tokens = 256; ///< the tokens of each
  int32_t pressure_cached = 3;          ///< system prompts its memory limit holds besides a request
  KvFormats formats;
  int32_t block_tokens = 16;
  int32_t threads = 0;
  size_t memory_limit = 0;  ///< 0: from the library's estimate
  bool progress = true;
};

/// The token ids both scenarios serve, the same in both modes.
struct Prompts {
  std::vector<int32_t> system;                   ///< [prefix_tokens], BOS first where the model has it
  std::vector<std::vector<int32_t>> questions;   ///< [requests][question_tokens]
  std::vector<std::vector<int32_t>> turns;       ///< [turns][turn_tokens] the user's text
  std::vector<std::vector<int32_t>> replies;     ///< [turns][reply_tokens] teacher-forced replies
  std::string origin;                            ///< where they come from, for the report
};

/// The prompts of both scenarios, cut from one stream of tokens in this order: the system
/// prompt, the questions, then each chat turn's user text and reply. The stream is random
/// ids (with the random-weight model, @p model_path empty), or --token_ids, or --text encoded
/// with @p tokenizer, through batchmax's helpers: BOS (when the model has it) starts the
/// system prompt and the chat's first turn.
Prompts make_prompts(const Config& cfg, const kvl_model* model, const kvl_tokenizer* tokenizer);

/// What a scenario runs on.
struct Run {
  const Config* cfg = nullptr;
  kvc_context* ctx = nullptr;
  const kvl_model* model = nullptr;
  int32_t vocab = 0;
  size_t memory_limit = 0;
  std::string model_id;  ///< kvc_prefix::model: tells this model's K/V from another's
};

/// One cache (with or without the prefix cache) and an engine over it, for steps of at most
/// max_tokens tokens.
class Engine {
 public:
  Engine(const Run& run, bool prefix_cache, int32_t max_tokens);

  /// Creates sequence @p seq for @p prompt and returns the position its prefill starts at:
  /// with the prefix cache, the tokens kvc_prefix_attach() attached for the prompt less its
  /// last token (whose logits the first new token needs); without, 0.
  int32_t start(int32_t seq, const std::vector<int32_t>& prompt);
  /// Prefills prompt[from, end) into @p seq alone, in chunks that end at multiples of
  /// chunk_tokens (absolute positions, so a token is computed in a call of the same shape
  /// whichever position the prefill starts at); logits() then holds its last position's.
  void prefill(int32_t seq, const std::vector<int32_t>& prompt, int32_t from);
  /// One decode step: token tokens[i] at positions[i] for sequence seqs[i]; logits() holds
  /// a row per sequence.
  void decode(int32_t n, const int32_t* seqs, const int32_t* tokens, const int32_t* positions);
  /// kvc_prefix_lookup() of @p prompt less its last token: what start() would attach now.
  int32_t lookup(const std::vector<int32_t>& prompt);
  /// kvc_prefix_publish() of the first @p n of @p tokens that @p seq holds; returns the
  /// tokens published.
  int32_t publish(int32_t seq, const int32_t* tokens, int32_t n);
  void remove(int32_t seq);

  const float* logits() const { return logits_.data(); }
  kvc_cache_stats stats() const;

 private:
  void forward(int32_t n, const int32_t* seqs, const int32_t* n_tokens, const int32_t* tokens,
               const int32_t* positions, const char* phase);

  const Run& run_;
  bool prefix_cache_;
  CachePtr cache_;
  EnginePtr engine_;
  std::vector<int32_t> positions_;
  std::vector<int32_t> ones_;  // n_tokens of a decode step
  std::vector<float> logits_;
};

/// The library's peak bytes of one sequence of @p prompt_tokens prefilled in chunks, then
/// @p new_tokens decoded (kvc_cache_estimate), in this run's cache format.
size_t sequence_estimate(const Run& run, int32_t prompt_tokens, int32_t new_tokens);

/// An untimed prefill and a few decode steps, so that the first timed mode does not pay for
/// cold caches and the first touch of the weights and the engine's buffers.
void warm_up(const Run& run, const Prompts& prompts);

/// Times to first token in arrival order, each from the arrival of a request (or chat turn) to
/// the choice of its first new token.
struct Ttft {
  std::vector<double> s;

  double first() const { return s.empty() ? 0 : s.front(); }
  /// The mean of the second and later ones: those that can find their prefix cached.
  double rest_mean() const {
    double sum = 0;
    for (size_t i = 1; i < s.size(); ++i) sum += s[i];
    return s.size() > 1 ? sum / static_cast<double>(s.size() - 1) : 0;
  }
  /// Their median, which a burst of other work on a shared machine moves less.
  double rest_median() const {
    return s.size() > 1 ? median(std::vector<double>(s.begin() + 1, s.end())) : 0;
  }
};

/// Scenario 1 in one mode: the requests arrive one after the other, each prefilled (its
/// time to first token measured from its arrival), then decoded together, every sequence
/// live, in batched steps.
struct ServeResult {
  int64_t prefill_tokens = 0;  ///< prompt tokens computed, all requests
  int64_t attached_tokens = 0; ///< prompt tokens attached from the prefix cache, all requests
  int64_t published_tokens = 0;
  int32_t lookup_tokens = 0;   ///< kvc_prefix_lookup() for request 2 just before it arrives
  int64_t generated = 0;
  size_t bytes_peak = 0;       ///< kvc_cache_stats::bytes_peak over the scenario
  size_t bytes_shared = 0;     ///< bytes_shared with every request prefilled
  size_t bytes_cached = 0;     ///< bytes_cached once every sequence was removed
  uint64_t bytes_reclaimed = 0;
  uint64_t prefix_hits = 0;
  uint64_t prefix_tokens_reused = 0;
  Ttft ttft;                   ///< per request
  double prefill_s = 0;        ///< every request's prefill (the sum of the TTFTs)
  double start_s = 0;          ///< of which creating the sequences (kvc_prefix_attach with it)
  double publish_s = 0;        ///< kvc_prefix_publish, all requests
  double decode_s = 0;
  double total_s = 0;
  /// The logits of every prefill's last position (request order), then of every decode step
  /// (step by step, request order): compared between the modes.
  std::vector<float> logits;

  double tokens_per_s() const { return total_s > 0 ? static_cast<double>(generated) / total_s : 0; }
};
ServeResult serve(const Run& run, const Prompts& prompts, bool prefix_cache);

/// Scenario 2 in one mode: each turn's prompt is the whole conversation so far plus the
/// user's new text, prefilled (from what the prefix cache attached, with it), then its reply
/// decoded; with the prefix cache the turn's tokens are published; the sequence is removed
/// between turns.
struct ChatResult {
  int64_t prefill_tokens = 0;
  std::vector<int64_t> turn_prefill_tokens;
  Ttft ttft;                   ///< per turn
  double start_s = 0;          ///< creating the sequences (kvc_prefix_attach with it), all turns
  double total_s = 0;
};
ChatResult chat(const Run& run, const Prompts& prompts, bool prefix_cache);

/// Scenario 3, with the prefix cache (prefix_pressure.cpp): requests over drifting system
/// prompts under a memory limit smaller than the blocks they publish.
struct PressureResult {
  int32_t requests = 0;
  int32_t failed = 0;             ///< requests a call failed for (none may)
  std::string first_failure;
  size_t bytes_limit = 0;
  size_t bytes_peak = 0;
  size_t bytes_cached = 0;        ///< at the end
  uint64_t bytes_reclaimed = 0;
  uint64_t prefix_hits = 0;
  uint64_t tokens_reused = 0;
  int32_t prompt_tokens = 0;      ///< of each system prompt
  /// kvc_prefix_lookup() of each system prompt at the end, the most recently used first.
  std::vector<int32_t> found_by_recency;
};
PressureResult pressure(const Run& run);

}  // namespace prefix
}  // namespace kvc_bench
