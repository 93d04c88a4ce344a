// kvc-bench prefix: the prefix cache (kvc_prefix_attach / kvc_prefix_publish) end to end, with
// the llama example engine, each scenario run twice in one process: without the prefix cache
// and with it (kvc_cache_params::prefix_cache).
//
// Scenario 1: --requests requests share a system prompt of --prefix_tokens tokens, each
// followed by its own question of --question_tokens, and generate --new_tokens greedily. They
// arrive one after the other; each is prefilled on its arrival (with the prefix cache: attached
// to the published blocks of its prompt less the last token, then prefilled from the attached
// position on, and published), its time to first token measured from its arrival to its first
// token's choice. Then all of them, live at once, decode in batched steps: without the prefix
// cache each holds its own copy of the system prompt's K/V, with it they share its blocks.
// Prefill chunks end at multiples of --chunk_tokens, so every token is computed in a call of the
// same shape in both modes: the K/V, and so the logits of every prefill's last position and of
// every decode step, must be bit-identical (memcmp), which prefix_logits_identical reports.
//
// Scenario 2: a chat of --turns turns, each adding --turn_tokens of user text and
// --reply_tokens of (teacher-forced) reply: without the prefix cache each turn prefills the
// whole conversation; with it, each turn attaches what the previous turns published.
//
// Scenario 3, with the prefix cache only: --pressure_requests requests over
// --pressure_prompts drifting system prompts under a memory limit that holds one request and
// about --pressure_cached prompts (prefix_pressure.cpp): no request may fail, and the most
// recently used prompts must still be found at the end.
//
// The last four lines are the ratios of the targets, each without over with the prefix
// cache: prefill tokens computed, peak K/V bytes and the mean time to first token of requests
// 2..N; then prefix_logits_identical.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common.hpp"
#include "kv_formats.hpp"
#include "machine.hpp"
#include "report.hpp"
#include "subcommands.hpp"

#if defined(KVC_BENCH_HAVE_LLAMA)
#include "prefix.hpp"
#endif

namespace kvc_bench {

const char* const kPrefixHelp =
    "  --requests=N          requests sharing the system prompt, >= 2 (default 16)\n"
    "  --prefix_tokens=N     the system prompt's tokens, a multiple of --chunk_tokens\n"
    "                        (default 2048)\n"
    "  --question_tokens=N   each request's own tokens after it (default 128)\n"
    "  --new_tokens=N        tokens generated per request, greedily (default 64)\n"
    "  --chunk_tokens=N      prefill chunks end at multiples of this position, a multiple of\n"
    "                        --block_tokens (default 128)\n"
    "  --turns=N             chat turns (default 4)\n"
    "  --turn_tokens=N       user tokens each turn adds (default 256)\n"
    "  --reply_tokens=N      reply tokens each turn adds, teacher-forced (default 64)\n"
    "  --pressure_requests=N scenario 3: requests, one at a time (default 48)\n"
    "  --pressure_prompts=N  its distinct system prompts (default 8)\n"
    "  --pressure_prefix_tokens=N  the tokens of each (default 256)\n"
    "  --pressure_cached=N   system prompts its memory limit holds beside a request (default 3)\n"
    "  --dtype=D --k_format=D --v_format=D  K/V storage formats (default f16)\n"
    "  --block_tokens=N      paged block size, the prefix cache's unit (default 16)\n"
    "  --threads=N           kvcache context threads, 0 = all cores (default 0)\n"
    "  --memory_limit_mib=X  the caches' memory limit (default: twice the library's estimate\n"
    "                        of the requests without the prefix cache)\n"
    "  --dim=N --hidden_dim=N --layers=N --heads=N --kv_heads=N --vocab=N\n"
    "                        shape of the random-weight model used without --model (default\n"
    "                        stories260K's: 64, 172, 5, 8, 4, 512)\n"
    "  --seed=N              seed of the random weights and prompts (default 1)\n"
    "  --model=PATH          a llama2.c checkpoint or a GGUF file (llama architecture) instead\n"
    "                        of random weights; the prompts are then consecutive windows of\n"
    "                        --text (system prompt, questions, chat turns)\n"
    "  --tokenizer=PATH      its tokenizer (default: a GGUF file's own vocabulary; for a llama2.c\n"
    "                        checkpoint tok<vocab>.bin or tokenizer.bin beside it)\n"
    "  --text=FILE           text of the prompts (default ../shared/data/tom_sawyer.txt)\n"
    "  --token_ids=FILE      the text already encoded, whitespace-separated decimal ids (as\n"
    "                        kvc-llama's --token-ids), instead of --text\n"
    "  --progress=0|1        progress on stderr (default 1)\n"
    "Figures of each mode are prefix_off_* (without the prefix cache) and prefix_on_* (with\n"
    "it), prefix_chat_off_* and prefix_chat_on_* for the chat; prefix_ttft_median_ratio is\n"
    "the median TTFT of requests 2..N off over on (less moved by other work on a shared\n"
    "machine than the mean), prefix_throughput_ratio generated tokens/s end to end, on over\n"
    "off. prefix_pressure_* are scenario 3's: failed requests (0 when the cache gave back\n"
    "cached blocks whenever a request needed them), reclaimed bytes, and the tokens found at\n"
    "the end of each system prompt, the most recently used first. The last lines:\n"
    "prefix_prefill_tokens_ratio, prefix_peak_kv_ratio, prefix_ttft_ratio (each off over on;\n"
    "TTFT: the mean of requests 2..N) and prefix_logits_identical (1: every prefill's last\n"
    "logits and every decode step's are bit-identical in both modes).\n";

#if !defined(KVC_BENCH_HAVE_LLAMA)

int run_prefix(Options&) {
  throw Error("kvc-bench was built without the llama example engine (target kvc_llama); "
              "configure with -DKVC_BUILD_EXAMPLES=ON");
}

#else

namespace {

using prefix::ChatResult;
using prefix::Config;
using prefix::Prompts;
using prefix::ServeResult;

int32_t get_count(Options& opts, const char* key, int32_t fallback, int32_t min) {
  return static_cast<int32_t>(opts.get_int(key, fallback, min, 1 << 20));
}

Config read_config(Options& opts) {
  Config cfg;
  cfg.requests = get_count(opts, "requests", 16, 2);
  cfg.prefix_tokens = get_count(opts, "prefix_tokens", 2048, 1);
  cfg.question_tokens = get_count(opts, "question_tokens", 128, 1);
  cfg.new_tokens = get_count(opts, "new_tokens", 64, 1);
  cfg.chunk_tokens = get_count(opts, "chunk_tokens", 128, 1);
  cfg.turns = get_count(opts, "turns", 4, 1);
  cfg.turn_tokens = get_count(opts, "turn_tokens", 256, 2);
  cfg.reply_tokens = get_count(opts, "reply_tokens", 64, 1);
  cfg.pressure_requests = get_count(opts, "pressure_requests", 48, 1);
  cfg.pressure_prompts = get_count(opts, "pressure_prompts", 8, 1);
  cfg.pressure_prefix_tokens = get_count(opts, "pressure_prefix_tokens", 256, 1);
  cfg.pressure_cached = get_count(opts, "pressure_cached", 3, 0);
  cfg.formats = read_kv_formats(opts);
  cfg.block_tokens = get_count(opts, "block_tokens", 16, 1);
  cfg.threads = static_cast<int32_t>(opts.get_int("threads", 0, 0, 4096));
  const double limit_mib = opts.get_double("memory_limit_mib", 0, 1e-3, 1e9);
  kvl_config shape{};  // stories260K's
  shape.dim = 64;
  shape.hidden_dim = 172;
  shape.n_layers = 5;
  shape.n_heads = 8;
  shape.n_kv_heads = 4;
  shape.vocab_size = 512;
  static_cast<LlamaOptions&>(cfg) = read_llama_options(opts, shape);
  cfg.progress = opts.get_int("progress", 1, 0, 1) != 0;
  opts.reject_unknown();

  if (opts.has("memory_limit_mib")) {
    cfg.memory_limit = static_cast<size_t>(limit_mib * 1024.0 * 1024.0);
  }
  if (cfg.chunk_tokens % cfg.block_tokens != 0) {
    throw UsageError("--chunk_tokens (" + std::to_string(cfg.chunk_tokens) +
                     ") must be a multiple of --block_tokens (" +
                     std::to_string(cfg.block_tokens) +
                     "), so that a request attaches the system prompt up to a chunk's start");
  }
  if (cfg.prefix_tokens % cfg.chunk_tokens != 0) {
    throw UsageError("--prefix_tokens (" + std::to_string(cfg.prefix_tokens) +
                     ") must be a multiple of --chunk_tokens (" +
                     std::to_string(cfg.chunk_tokens) +
                     "), so that the questions are prefilled in the same chunks in both modes");
  }
  check_llama_options(cfg, opts);
  return cfg;
}

void progress_line(const Config& cfg, const std::string& text) {
  if (!cfg.progress) return;
  std::fprintf(stderr, "prefix: %s\n", text.c_str());
  std::fflush(stderr);
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

// Rows of `vocab` logits that differ in any bit between the modes (all of them when the
// counts differ).
size_t differing_rows(const std::vector<float>& a, const std::vector<float>& b, int32_t vocab) {
  const size_t row = static_cast<size_t>(vocab);
  if (a.size() != b.size()) return std::max(a.size(), b.size()) / row;
  size_t differ = 0;
  for (size_t at = 0; at < a.size(); at += row) {
    if (std::memcmp(a.data() + at, b.data() + at, row * sizeof(float)) != 0) ++differ;
  }
  return differ;
}

void report_serve(const std::string& p, const ServeResult& r, bool prefix_cache) {
  report(p + "prefill_tokens", r.prefill_tokens);
  report(p + "attached_tokens", r.attached_tokens);
  report(p + "peak_kv_bytes", r.bytes_peak);
  report(p + "ttft_first_s", r.ttft.first());
  report(p + "ttft_rest_mean_s", r.ttft.rest_mean());
  report(p + "ttft_rest_median_s", r.ttft.rest_median());
  report(p + "prefill_s", r.prefill_s);
  report(p + "start_s", r.start_s);
  report(p + "decode_s", r.decode_s);
  report(p + "total_s", r.total_s);
  report(p + "generated_tokens", r.generated);
  report(p + "tokens_per_s", r.tokens_per_s());
  if (!prefix_cache) return;
  report(p + "published_tokens", r.published_tokens);
  report(p + "publish_s", r.publish_s);
  report(p + "lookup_tokens", r.lookup_tokens);
  report(p + "prefix_hits", r.prefix_hits);
  report(p + "prefix_tokens_reused", r.prefix_tokens_reused);
  report(p + "bytes_shared", r.bytes_shared);
  report(p + "bytes_cached_after", r.bytes_cached);
  report(p + "bytes_reclaimed", r.bytes_reclaimed);
}

void report_pressure(const prefix::PressureResult& r) {
  report("prefix_pressure_requests", r.requests);
  report("prefix_pressure_failed", r.failed);
  report("prefix_pressure_limit_bytes", r.bytes_limit);
  report("prefix_pressure_peak_bytes", r.bytes_peak);
  report("prefix_pressure_cached_bytes", r.bytes_cached);
  report("prefix_pressure_reclaimed_bytes", r.bytes_reclaimed);
  report("prefix_pressure_hits", r.prefix_hits);
  report("prefix_pressure_tokens_reused", r.tokens_reused);
  std::string found;
  for (int32_t n : r.found_by_recency) found += (found.empty() ? "" : ",") + std::to_string(n);
  report("prefix_pressure_found_by_recency", found);
  // How many prompts, from the most recently used on, are still found whole.
  size_t kept = 0;
  while (kept < r.found_by_recency.size() && r.found_by_recency[kept] == r.prompt_tokens) ++kept;
  report("prefix_pressure_recent_kept", kept);
}

void report_chat(const std::string& p, const ChatResult& r) {
  report(p + "prefill_tokens", r.prefill_tokens);
  for (size_t t = 0; t < r.ttft.s.size(); ++t) {
    report(p + "turn" + std::to_string(t + 1) + "_prefill_tokens", r.turn_prefill_tokens[t]);
    report(p + "turn" + std::to_string(t + 1) + "_ttft_s", r.ttft.s[t]);
  }
  report(p + "ttft_rest_mean_s", r.ttft.rest_mean());
  report(p + "start_s", r.start_s);
  report(p + "total_s", r.total_s);
}

}  // namespace

int run_prefix(Options& opts) {
  Config cfg = read_config(opts);
  report_machine();  // the load as the run starts: the timings move with it

  // The model: random weights of the configured shape, a llama2.c checkpoint or a GGUF file.
  char err[1024] = {0};
  kvl_model* raw_model = nullptr;
  const bool real = !cfg.model_path.empty();
  const int32_t request_tokens = cfg.prefix_tokens + cfg.question_tokens + cfg.new_tokens;
  const int32_t chat_tokens = cfg.turns * (cfg.turn_tokens + cfg.reply_tokens);
  const int32_t longest = std::max(request_tokens, chat_tokens);
  if (real) {
    if (kvl_model_load(cfg.model_path.c_str(), &raw_model, err, sizeof err) != 0) {
      throw Error(std::string("kvl_model_load: ") + err);
    }
  } else {
    cfg.shape.seq_len = longest;
    if (kvl_model_random(&cfg.shape, cfg.seed, &raw_model, err, sizeof err) != 0) {
      throw Error(std::string("kvl_model_random: ") + err);
    }
  }
  ModelPtr model(raw_model);
  const kvl_config mc = *kvl_model_config(model.get());
  check_head_dim(cfg.formats, mc.dim / mc.n_heads);
  std::vector<std::string> notes;
  if (real && longest > mc.seq_len) {
    notes.push_back("positions up to " + std::to_string(longest) + " pass the checkpoint's "
                    "seq_len " + std::to_string(mc.seq_len) + ": the model is run past its "
                    "context (the modes still compute the same; the text is modelled less well)");
  }

  TokenizerPtr tokenizer;
  if (real && cfg.ids_path.empty()) {
    tokenizer = open_tokenizer(cfg.tokenizer_path, cfg.model_path, mc.vocab_size, cfg.text_path);
  }
  const Prompts prompts = prefix::make_prompts(cfg, model.get(), tokenizer.get());

  const std::string yaml = "threads: " + std::to_string(cfg.threads) + "\n";
  kvc_context* raw_ctx = nullptr;
  check(kvc_context_create(yaml.c_str(), &raw_ctx), "kvc_context_create");
  ContextPtr ctx(raw_ctx);

  prefix::Run run;
  run.cfg = &cfg;
  run.ctx = ctx.get();
  run.model = model.get();
  run.vocab = mc.vocab_size;
  run.model_id = real ? "kvc-bench prefix: " + cfg.model_path
                      : "kvc-bench prefix: random weights, seed " + std::to_string(cfg.seed);
  run.memory_limit = size_t{1} << 30;  // for the probes of sequence_estimate
  run.memory_limit =
      cfg.memory_limit != 0
          ? cfg.memory_limit
          : 2 * std::max(static_cast<size_t>(cfg.requests) *
                             prefix::sequence_estimate(
                                 run, cfg.prefix_tokens + cfg.question_tokens, cfg.new_tokens),
                         prefix::sequence_estimate(run, chat_tokens - cfg.reply_tokens,
                                                   cfg.reply_tokens));

  for (const std::string& n : notes) progress_line(cfg, "note: " + n);
  progress_line(cfg, prompts.origin);
  prefix::warm_up(run, prompts);

  ServeResult off_serve, on_serve;
  ChatResult off_chat, on_chat;
  for (const bool on : {false, true}) {
    const std::string mode = on ? "prefix cache on" : "prefix cache off";
    ServeResult& s = on ? on_serve : off_serve;
    s = prefix::serve(run, prompts, on);
    progress_line(cfg, std::to_string(cfg.requests) + " requests, " + mode + ": prefill " +
                           seconds(s.prefill_s) + " (" + std::to_string(s.prefill_tokens) +
                           " tokens), decode " + seconds(s.decode_s) + ", TTFT " +
                           seconds(s.ttft.first()) + " first, " + seconds(s.ttft.rest_mean()) +
                           " the others");
    ChatResult& c = on ? on_chat : off_chat;
    c = prefix::chat(run, prompts, on);
    progress_line(cfg, std::to_string(cfg.turns) + "-turn chat, " + mode + ": " +
                           std::to_string(c.prefill_tokens) + " prefill tokens, " +
                           seconds(c.total_s));
  }
  const prefix::PressureResult pressure = prefix::pressure(run);
  progress_line(cfg, std::to_string(pressure.requests) + " requests under a " +
                         std::to_string(pressure.bytes_limit) + "-byte limit: " +
                         std::to_string(pressure.failed) + " failed" +
                         (pressure.first_failure.empty() ? "" : " (" + pressure.first_failure + ")"));
  const int64_t expected_attached = int64_t{cfg.requests - 1} * cfg.prefix_tokens;
  if (on_serve.attached_tokens != expected_attached) {
    notes.push_back("requests 2.." + std::to_string(cfg.requests) + " attached " +
                    std::to_string(on_serve.attached_tokens) + " tokens in all, not " +
                    std::to_string(expected_attached) + " (the system prompt each)");
  }
  const size_t logits_rows = off_serve.logits.size() / static_cast<size_t>(mc.vocab_size);
  const size_t differing = differing_rows(off_serve.logits, on_serve.logits, mc.vocab_size);

  // ---- report
  std::printf("kvc-bench prefix: %s model dim %d, hidden %d, %d layers, %d heads (%d KV), "
              "head_dim %d, vocab %d; matrix products by %s\n",
              real ? cfg.model_path.c_str() : "random-weight", mc.dim, mc.hidden_dim, mc.n_layers,
              mc.n_heads, mc.n_kv_heads, mc.dim / mc.n_heads, mc.vocab_size,
              kvl_model_matmul(model.get()));
  std::printf("prompts: %s\n", prompts.origin.c_str());
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  report("prefix_model", real ? cfg.model_path : std::string("random"));
  report("prefix_matmul", std::string(kvl_model_matmul(model.get())));
  report("prefix_layers", mc.n_layers);
  report("prefix_kv_heads", mc.n_kv_heads);
  report("prefix_head_dim", mc.dim / mc.n_heads);
  report("prefix_vocab", mc.vocab_size);
  report_kv_formats("prefix_", cfg.formats);
  report("prefix_block_tokens", cfg.block_tokens);
  report("prefix_chunk_tokens", cfg.chunk_tokens);
  report("prefix_memory_limit_bytes", run.memory_limit);
  report("prefix_requests", cfg.requests);
  report("prefix_prefix_tokens", cfg.prefix_tokens);
  report("prefix_question_tokens", cfg.question_tokens);
  report("prefix_new_tokens", cfg.new_tokens);
  report_serve("prefix_off_", off_serve, false);
  report_serve("prefix_on_", on_serve, true);
  report("prefix_logits_rows", logits_rows);
  report("prefix_logits_rows_differing", differing);
  report("prefix_chat_turns", cfg.turns);
  report("prefix_chat_turn_tokens", cfg.turn_tokens);
  report("prefix_chat_reply_tokens", cfg.reply_tokens);
  report_chat("prefix_chat_off_", off_chat);
  report_chat("prefix_chat_on_", on_chat);
  report_pressure(pressure);
  report("prefix_chat_prefill_tokens_ratio",
         ratio(static_cast<double>(off_chat.prefill_tokens),
               static_cast<double>(on_chat.prefill_tokens)));
  report("prefix_chat_ttft_ratio", ratio(off_chat.ttft.rest_mean(), on_chat.ttft.rest_mean()));
  report("prefix_ttft_median_ratio",
         ratio(off_serve.ttft.rest_median(), on_serve.ttft.rest_median()));
  report("prefix_throughput_ratio", ratio(on_serve.tokens_per_s(), off_serve.tokens_per_s()));
  report("prefix_prefill_tokens_ratio",
         ratio(static_cast<double>(off_serve.prefill_tokens),
               static_cast<double>(on_serve.prefill_tokens)));
  report("prefix_peak_kv_ratio", ratio(static_cast<double>(off_serve.bytes_peak),
                                       static_cast<double>(on_serve.bytes_peak)));
  report("prefix_ttft_ratio", ratio(off_serve.ttft.rest_mean(), on_serve.ttft.rest_mean()));
  report("prefix_logits_identical", differing == 0 && logits_rows > 0 ? 1 : 0);
  return 0;
}

#endif  // KVC_BENCH_HAVE_LLAMA

}  // namespace kvc_bench
