// kvc-bench batchmax: the Batch-Max result (Metel et al., arXiv 2412.05693) end to end.
//
// Under ONE memory limit for K/V and the engine's activation buffers, N requests with long
// prompts and short generations are served by the llama example engine (kvc_llama) in four
// modes (the fifth with --demote):
//   full            no policy: every token stays;
//   once            snapkv, compressed once after a chunked prefill (KVC_PREFILL_ONCE), at the
//                   first decode token;
//   once_layerwise  snapkv, KVC_PREFILL_ONCE over a whole-prompt prefill marked as the
//                   prompt's end (kvc_batch::prompt_end): each layer is compressed right after
//                   its attention over the prompt, NVIDIA kvpress's way;
//   per_chunk       snapkv, compressed after every prefill chunk (KVC_PREFILL_PER_CHUNK);
//   per_chunk_demote  with --demote=F: per_chunk with "demote before evict" to F, the same
//                   budget counted in bytes, so the same bytes per sequence as per_chunk.
// Every mode runs with the first K/V storage format of --formats (default f16); per_chunk
// (--format_modes) also runs with each of the others (default q8_0 and q8_0/q4_0), each a row
// of its own under the same limit, so a smaller format shows as a larger batch.
// Each mode's batch is the largest B (at most N) for which B x the library's estimate of one
// sequence's peak (kvc_cache_estimate with the mode's chunk and mark) plus the engine's
// activation bytes for B x chunk tokens (kvl_engine_activation_bytes) fit the limit; its cache
// gets the limit less those activation bytes. The requests are served in waves of B: batched
// prefill chunk by chunk (all B sequences' chunk in one forward call), then batched decoding
// one token per sequence per step. The cache must never report OUT_OF_MEMORY and its
// bytes_peak must stay under its share of the limit.
//
// The default limit holds two full-cache sequences, each with one chunk's activations, plus a
// margin smaller than one, so the full cache (and compress-once, whose peak is the whole
// prompt) gets a batch of 2.
//
// Prefill and decode are timed apart (wall clock, and process CPU time as a cross-check).
// The modes' waves are interleaved in time by default, so that load from other processes on
// a shared machine falls on every mode alike. The last six lines are the batch, decode-phase
// tokens/s and end-to-end tokens/s ratios of per_chunk over the best other mode, then the
// decode-phase, batch and end-to-end ratios over full, all in the first format.
// docs/batchmax.md explains the run and its numbers.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <time.h>

#include "batchmax.hpp"
#include "common.hpp"
#include "machine.hpp"
#include "report.hpp"
#include "subcommands.hpp"
#include "timer.hpp"

#if defined(KVC_BENCH_HAVE_LLAMA)
#include "llama_handles.hpp"
#include "llama_options.hpp"
#endif

namespace kvc_bench {

const char* const kBatchmaxHelp =
    "  --requests=N          requests served in every mode (default 20)\n"
    "  --prompt_tokens=N     prompt length (default 2048; clamped to a checkpoint's\n"
    "                        seq_len - new_tokens)\n"
    "  --new_tokens=N        tokens generated per request (default 128)\n"
    "  --chunk_tokens=N      prefill chunk (default 256)\n"
    "  --budget=N            tokens kept per (sequence, layer, KV head) (default 512)\n"
    "  --policy=NAME         eviction policy of the compressing modes (default snapkv)\n"
    "  --modes=LIST          comma-separated subset of full,once,once_layerwise,per_chunk,\n"
    "                        per_chunk_demote (default all; per_chunk_demote with --demote\n"
    "                        only); once_layerwise prefills each prompt in one chunk marked\n"
    "                        as its end\n"
    "  --demote=F            adds the mode per_chunk_demote: per_chunk with the same policy\n"
    "                        and budget, demoting to F (or K/V, as --formats) the tokens\n"
    "                        the budget cannot keep in the cache's format before evicting;\n"
    "                        the budget then counts bytes, so its bytes per sequence are\n"
    "                        per_chunk's\n"
    "  --demote_keep=R       with --demote: the share of a head's budget kept in the cache's\n"
    "                        format, in [0, 1] (default: the library's, 0.25)\n"
    "  --memory_limit_mib=X  the memory limit in MiB, for K/V and the engine's activation\n"
    "                        buffers together (default: --limit_seqs full-cache sequences)\n"
    "  --limit_seqs=X        default limit as a number of full-cache sequences, each the\n"
    "                        library's estimate plus the activations of one chunk\n"
    "                        (default 2.25: two, plus a margin)\n"
    "  --formats=LIST        K/V storage formats, comma-separated, each F (K and V) or K/V, of\n"
    "                        f16, bf16, f32, q8_0, q4_0 (default f16,q8_0,q8_0/q4_0); every\n"
    "                        mode runs in the first, which also sets the default limit\n"
    "  --format_modes=LIST   modes that also run in the other formats (default per_chunk)\n"
    "  --dtype=D --k_format=D --v_format=D  one format for every mode instead of --formats:\n"
    "                        --dtype sets K and V, the others override one of them\n"
    "  --block_tokens=N      paged block size (default 16)\n"
    "  --threads=N           kvcache context threads, 0 = all cores (default 0)\n"
    "  --dim=N --hidden_dim=N --layers=N --heads=N --kv_heads=N --vocab=N\n"
    "                        shape of the random-weight model used without --model\n"
    "                        (default 256, 768, 6, 4, 4, 32000: head_dim 64, which the\n"
    "                        quantized formats' groups of 32 divide)\n"
    "  --seed=N              seed of the random weights and prompts (default 1)\n"
    "  --model=PATH          a llama2.c checkpoint or a GGUF file (llama architecture) instead\n"
    "                        of random weights; prompts are then consecutive windows of --text\n"
    "                        (after BOS when the model has that convention) and the\n"
    "                        continuations are teacher-forced, so the mean NLL per mode is\n"
    "                        comparable\n"
    "  --tokenizer=PATH      its tokenizer (default: a GGUF file's own vocabulary; for a llama2.c\n"
    "                        checkpoint tok<vocab>.bin or tokenizer.bin beside it)\n"
    "  --text=FILE           text of the prompts (default ../shared/data/tom_sawyer.txt)\n"
    "  --token_ids=FILE      the text already encoded, whitespace-separated decimal ids (as\n"
    "                        kvc-llama's --token-ids), instead of --text\n"
    "  --csv=PATH            CSV output (default build/release/batchmax.csv when that folder\n"
    "                        exists, else ./batchmax.csv)\n"
    "  --png=PATH            PNG plot drawn by gnuplot (default: batchmax.png beside the CSV)\n"
    "  --interleave=0|1      1: run the modes' waves interleaved in time, so a busy minute on a\n"
    "                        shared machine slows every mode alike; 0: one mode after the\n"
    "                        other (default 1)\n"
    "  --progress=0|1        progress on stderr (default 1)\n"
    "The last lines: batchmax_batch_ratio_vs_best_other,\n"
    "batchmax_decode_throughput_ratio_vs_best_other and batchmax_throughput_ratio_vs_best_other\n"
    "(per_chunk over the best of the other modes run, for each figure; the batchmax_best_other_*\n"
    "lines before them name those modes), then batchmax_decode_throughput_ratio,\n"
    "batchmax_batch_ratio and batchmax_throughput_ratio (per_chunk over full), all in the first\n"
    "format. Before them, each mode run in another format against the same mode in the first:\n"
    "batchmax_<mode>_<format>_batch_ratio_vs_<first>, ..._decode_throughput_ratio_vs_<first>,\n"
    "..._throughput_ratio_vs_<first> and, with --model, ..._nll_delta_vs_<first> (a format\n"
    "K/V such as q8_0/q4_0 is written q8_0_q4_0 in these names). With per_chunk_demote:\n"
    "batchmax_per_chunk_demote_batch_ratio_vs_per_chunk, ..._decode_throughput_ratio_vs_per_chunk,\n"
    "..._throughput_ratio_vs_per_chunk and, with --model, ..._nll_delta_vs_per_chunk; it is\n"
    "not one of the \"other modes\" of the _vs_best_other lines (it is a variant of per_chunk).\n";

#if !defined(KVC_BENCH_HAVE_LLAMA)

int run_batchmax(Options&) {
  throw Error("kvc-bench was built without the llama example engine (target kvc_llama); "
              "configure with -DKVC_BUILD_EXAMPLES=ON");
}

#else

namespace {

using batchmax::ModeResult;
using batchmax::Requests;

struct Config : LlamaOptions {
  int32_t requests = 20;
  int32_t prompt_tokens = 2048;
  int32_t new_tokens = 128;
  int32_t chunk_tokens = 256;
  int32_t budget = 512;
  std::string policy = "snapkv";
  std::vector<std::string> modes;
  bool demote = false;  // --demote given: the mode per_chunk_demote
  KvFormats demote_formats;
  double demote_keep = -1;  // < 0: the library's default
  size_t memory_limit = 0;  // 0: from limit_seqs
  double limit_seqs = 2.25;
  std::vector<KvFormats> formats;  // the first: every mode's; the others: format_modes'
  std::vector<std::string> format_modes;
  int32_t block_tokens = 16;
  int32_t threads = 0;
  std::string csv_path;
  std::string png_path;
  bool progress = true;
  bool interleave = true;
};

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// The comma-separated items of @p text; throws UsageError naming @p option for one given twice.
std::vector<std::string> split_list(const std::string& text, const std::string& option) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    if (contains(items, item)) throw UsageError("--" + option + ": '" + item + "' given twice");
    items.push_back(item);
    start = end + 1;
  }
  return items;
}

std::vector<std::string> split_modes(const std::string& text, const std::string& option) {
  static const char* const kModes[] = {"full", "once", "once_layerwise", "per_chunk",
                                       "per_chunk_demote"};
  const std::vector<std::string> modes = split_list(text, option);
  for (const std::string& m : modes) {
    if (std::find(std::begin(kModes), std::end(kModes), m) == std::end(kModes)) {
      throw UsageError("--" + option +
                       ": expected full, once, once_layerwise, per_chunk or per_chunk_demote, "
                       "got '" + m + "'");
    }
  }
  // Always in the canonical order, so the table and the plot read the same way.
  std::vector<std::string> ordered;
  for (const char* m : kModes) {
    if (contains(modes, m)) ordered.emplace_back(m);
  }
  return ordered;
}

std::vector<KvFormats> split_formats(const std::string& text) {
  std::vector<KvFormats> formats;
  for (const std::string& item : split_list(text, "formats")) {
    const KvFormats f = parse_kv_formats(item, "formats");
    if (std::find(formats.begin(), formats.end(), f) != formats.end()) {
      throw UsageError("--formats: " + f.name() + " given twice (as '" + item + "')");
    }
    formats.push_back(f);
  }
  return formats;
}

Config read_config(Options& opts) {
  Config cfg;
  cfg.requests = static_cast<int32_t>(opts.get_int("requests", 20, 1, 1 << 16));
  cfg.prompt_tokens = static_cast<int32_t>(opts.get_int("prompt_tokens", 2048, 2, 1 << 20));
  cfg.new_tokens = static_cast<int32_t>(opts.get_int("new_tokens", 128, 1, 1 << 20));
  cfg.chunk_tokens = static_cast<int32_t>(opts.get_int("chunk_tokens", 256, 2, 1 << 20));
  cfg.budget = static_cast<int32_t>(opts.get_int("budget", 512, 1, 1 << 24));
  cfg.policy = opts.get_string("policy", "snapkv");
  cfg.demote = opts.has("demote");
  if (cfg.demote) cfg.demote_formats = parse_kv_formats(opts.get_string("demote", ""), "demote");
  if (opts.has("demote_keep")) {
    if (!cfg.demote) throw UsageError("--demote_keep needs --demote");
    cfg.demote_keep = opts.get_double("demote_keep", 0.25, 0.0, 1.0);
  }
  cfg.modes = split_modes(opts.get_string("modes", cfg.demote ? "full,once,once_layerwise,"
                                                                 "per_chunk,per_chunk_demote"
                                                               : "full,once,once_layerwise,"
                                                                 "per_chunk"),
                          "modes");
  if (!cfg.demote && contains(cfg.modes, "per_chunk_demote")) {
    throw UsageError("--modes: per_chunk_demote needs --demote=F");
  }
  const double limit_mib = opts.get_double("memory_limit_mib", 0, 1e-3, 1e9);
  cfg.limit_seqs = opts.get_double("limit_seqs", 2.25, 0.01, 1e6);
  const bool one_format = kv_formats_given(opts);
  const KvFormats given = read_kv_formats(opts);
  cfg.formats = split_formats(opts.get_string("formats", "f16,q8_0,q8_0/q4_0"));
  cfg.format_modes = split_modes(opts.get_string("format_modes", "per_chunk"), "format_modes");
  if (one_format) {
    if (opts.has("formats")) {
      throw UsageError("--formats lists the formats to run: give it without --dtype, "
                       "--k_format and --v_format, which pick one");
    }
    cfg.formats = {given};
  }
  cfg.block_tokens = static_cast<int32_t>(opts.get_int("block_tokens", 16, 1, 1 << 16));
  cfg.threads = static_cast<int32_t>(opts.get_int("threads", 0, 0, 4096));
  kvl_config shape{};  // kv_heads 0: as many as --heads
  shape.dim = 256;
  shape.hidden_dim = 768;
  shape.n_layers = 6;
  shape.n_heads = 4;
  shape.vocab_size = 32000;
  static_cast<LlamaOptions&>(cfg) = read_llama_options(opts, shape);
  cfg.csv_path = opts.get_string(
      "csv", is_dir("build/release") ? "build/release/batchmax.csv" : "batchmax.csv");
  cfg.png_path = opts.get_string("png", dir_of(cfg.csv_path) + "/batchmax.png");
  cfg.progress = opts.get_int("progress", 1, 0, 1) != 0;
  cfg.interleave = opts.get_int("interleave", 1, 0, 1) != 0;
  opts.reject_unknown();

  if (opts.has("memory_limit_mib")) {
    cfg.memory_limit = static_cast<size_t>(limit_mib * 1024.0 * 1024.0);
  }
  check_llama_options(cfg, opts);
  if (cfg.modes.empty()) throw UsageError("--modes: no mode given");
  return cfg;
}

struct ModeSpec {
  const char* name;
  bool compress;
  kvc_prefill_compression prefill;
  const char* prefill_name;
  // The whole prompt in one chunk, marked as the prompt's end.
  bool whole_prompt_marked;
  // Demote before evict, to Config::demote_formats.
  bool demote;
};

ModeSpec mode_spec(const std::string& name) {
  if (name == "full") return {"full", false, KVC_PREFILL_NONE, "none", false, false};
  if (name == "once") return {"once", true, KVC_PREFILL_ONCE, "once", false, false};
  if (name == "once_layerwise") {
    return {"once_layerwise", true, KVC_PREFILL_ONCE, "once", true, false};
  }
  if (name == "per_chunk_demote") {
    return {"per_chunk_demote", true, KVC_PREFILL_PER_CHUNK, "per_chunk", false, true};
  }
  return {"per_chunk", true, KVC_PREFILL_PER_CHUNK, "per_chunk", false, false};
}

int32_t chunk_of(const ModeSpec& spec, const Config& cfg) {
  return spec.whole_prompt_marked ? cfg.prompt_tokens : cfg.chunk_tokens;
}

CachePtr make_cache(kvc_context* ctx, const kvl_model* model, const Config& cfg,
                    const ModeSpec& spec, const KvFormats& formats, size_t limit) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  kvl_cache_params_for(model, &p);
  formats.apply(&p);
  p.layout = KVC_LAYOUT_PAGED;
  p.block_tokens = cfg.block_tokens;
  p.memory_limit = limit;
  if (spec.compress) {
    p.policy = cfg.policy.c_str();
    p.budget = cfg.budget;
    p.prefill = spec.prefill;
  }
  if (spec.demote) {
    p.demote_k_dtype = cfg.demote_formats.k;
    p.demote_v_dtype = cfg.demote_formats.v;
    if (cfg.demote_keep >= 0) p.demote_keep = cfg.demote_keep;
  }
  kvc_cache* raw = nullptr;
  check(kvc_cache_create(ctx, &p, &raw),
        ("kvc_cache_create (" + std::string(spec.name) + ", " + formats.name() + ")").c_str());
  return CachePtr(raw);
}

// The library's peak of one sequence in this mode.
size_t estimate(const kvc_cache* cache, const Config& cfg, const ModeSpec& spec) {
  kvc_estimate_request request;
  kvc_estimate_request_init(&request, cfg.prompt_tokens, chunk_of(spec, cfg), cfg.new_tokens);
  request.marks_prompt_end = spec.whole_prompt_marked ? 1 : 0;
  size_t bytes = 0;
  check(kvc_cache_estimate(cache, &request, &bytes), "kvc_cache_estimate");
  return bytes;
}

// The engine's activation bytes for a batch of `batch` sequences in this mode: its buffers are
// sized for batch x chunk tokens, which also hold a decode step's batch tokens.
size_t activation_bytes(const kvl_model* model, const Config& cfg, const ModeSpec& spec,
                        int32_t batch) {
  const int64_t tokens = int64_t{batch} * chunk_of(spec, cfg);
  if (tokens > INT32_MAX) return SIZE_MAX;
  const size_t bytes = kvl_engine_activation_bytes(model, static_cast<int32_t>(tokens));
  if (bytes == 0) {
    throw Error("kvl_engine_activation_bytes: no size for " + std::to_string(tokens) + " tokens");
  }
  return bytes;
}

// The largest batch, at most cfg.requests, whose K/V (batch x `per_seq`) and activations fit
// `limit` together; 0 when one sequence does not.
int32_t largest_batch(const kvl_model* model, const Config& cfg, const ModeSpec& spec,
                      size_t per_seq, size_t limit) {
  int32_t batch = 0;
  while (batch < cfg.requests) {
    const size_t next = static_cast<size_t>(batch) + 1;
    const size_t act = activation_bytes(model, cfg, spec, batch + 1);
    if (act > limit || per_seq > (limit - act) / next) break;
    ++batch;
  }
  return batch;
}

kvc_cache_stats get_stats(const kvc_cache* cache) {
  kvc_cache_stats st{};
  st.struct_size = sizeof st;
  check(kvc_cache_get_stats(cache, &st), "kvc_cache_get_stats");
  return st;
}

// -log softmax(row)[target], in double.
double nll_of(const float* row, int32_t n, int32_t target) {
  float mx = row[0];
  for (int32_t i = 1; i < n; ++i) mx = std::max(mx, row[i]);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
  return std::log(sum) + static_cast<double>(mx) - static_cast<double>(row[target]);
}

// Progress on stderr: rewritten in place on a terminal, one line per phase otherwise.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), tty_(enabled && ::isatty(2) != 0) {}
  // A transient status (only on a terminal).
  void status(const std::string& line) {
    if (!tty_) return;
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
  }
  // A line that stays.
  void line(const std::string& text) {
    if (!enabled_) return;
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", text.c_str());
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  bool tty_;
};

// CPU seconds used by this process (all its threads) since construction: on a shared machine
// it moves less with other processes' load than wall time does.
class CpuTimer {
 public:
  CpuTimer() : start_(now()) {}
  double seconds() const { return now() - start_; }

 private:
  static double now() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  double start_;
};

std::string fmt(const char* format, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, a);
  return buf;
}

// One mode: its cache (with the one memory limit), its batch size and its engine, served
// wave by wave so that the modes' waves can be interleaved in time (a shared, noisy machine
// then slows every mode alike instead of whichever ran during a busy minute).
class ModeRun {
 public:
  ModeRun(kvc_context* ctx, const kvl_model* model, const Config& cfg, const ModeSpec& spec,
          const KvFormats& formats, bool base_format, size_t limit, const Requests& req)
      : cfg_(cfg), spec_(spec), req_(req),
        vocab_(kvl_model_config(model)->vocab_size) {
    r_.mode = spec.name;
    r_.formats = formats;
    r_.base_format = base_format;
    r_.policy = spec.compress ? cfg.policy : "-";
    r_.prefill = spec.prefill_name;
    r_.chunk_tokens = chunk_of(spec, cfg);
    r_.estimate_bytes =
        estimate(make_cache(ctx, model, cfg, spec, formats, limit).get(), cfg, spec);
    batch_ = largest_batch(model, cfg, spec, r_.estimate_bytes, limit);
    if (batch_ == 0) {
      throw Error(r_.label() + ": one sequence needs " +
                  std::to_string(r_.estimate_bytes) + " bytes of K/V and " +
                  std::to_string(activation_bytes(model, cfg, spec, 1)) +
                  " of activations, more than the limit of " + std::to_string(limit));
    }
    r_.max_batch = batch_;
    r_.waves = (cfg.requests + batch_ - 1) / batch_;
    r_.activation_bytes = activation_bytes(model, cfg, spec, batch_);
    kv_limit_ = limit - r_.activation_bytes;
    cache_ = make_cache(ctx, model, cfg, spec, formats, kv_limit_);

    kvl_engine* raw = nullptr;
    char err[1024] = {0};
    if (kvl_engine_create(model, cache_.get(), batch_ * r_.chunk_tokens, &raw, err, sizeof err) !=
        0) {
      throw Error(std::string("kvl_engine_create: ") + err);
    }
    engine_.reset(raw);
    const size_t b = static_cast<size_t>(batch_);
    ids_.resize(b);
    n_tokens_.resize(b);
    prompt_end_.resize(b);
    tokens_.resize(b * static_cast<size_t>(r_.chunk_tokens));
    positions_.resize(tokens_.size());
    next_.resize(b);
    logits_.resize(b * static_cast<size_t>(vocab_));
  }

  const ModeResult& result() const { return r_; }
  bool done() const { return wave_ >= r_.waves; }
  /// Share of the mode's waves already served.
  double fraction_done() const { return static_cast<double>(wave_) / r_.waves; }

  /// Serves the next wave: creates its sequences, prefills them chunk by chunk, decodes
  /// new_tokens steps, checks the memory peak and removes the sequences.
  void run_wave(Progress& progress) {
    const int32_t first = wave_ * batch_;
    const int32_t nb = std::min(batch_, cfg_.requests - first);
    const bool teacher = !req_.continuations.empty();
    const int32_t chunk = r_.chunk_tokens;
    const int32_t n_chunks = (cfg_.prompt_tokens + chunk - 1) / chunk;
    const std::string wave = r_.label() + " wave " + std::to_string(wave_ + 1) + "/" +
                             std::to_string(r_.waves) + " (batch " + std::to_string(nb) + ")";
    Timer total;
    for (int32_t i = 0; i < nb; ++i) {
      ids_[static_cast<size_t>(i)] = first + i;
      check(kvc_seq_create(cache_.get(), first + i), "kvc_seq_create");
    }

    // Prefill: chunk c of every sequence of the wave in one call.
    Timer prefill;
    CpuTimer prefill_cpu;
    for (int32_t c = 0; c < n_chunks; ++c) {
      const int32_t begin = c * chunk;
      const int32_t len = std::min(chunk, cfg_.prompt_tokens - begin);
      const bool mark = spec_.whole_prompt_marked && c + 1 == n_chunks;
      size_t at = 0;
      for (int32_t i = 0; i < nb; ++i) {
        n_tokens_[static_cast<size_t>(i)] = len;
        prompt_end_[static_cast<size_t>(i)] = mark ? 1 : 0;
        const std::vector<int32_t>& prompt = req_.prompts[static_cast<size_t>(first + i)];
        for (int32_t t = 0; t < len; ++t, ++at) {
          tokens_[at] = prompt[static_cast<size_t>(begin + t)];
          positions_[at] = begin + t;
        }
      }
      forward(nb, "prefill");
      progress.status(wave + ": prefill chunk " + std::to_string(c + 1) + "/" +
                      std::to_string(n_chunks) + ", " +
                      fmt("%.0f", static_cast<double>(nb) * (begin + len) / prefill.seconds()) +
                      " prompt tok/s");
    }
    const double prefill_s = prefill.seconds();
    r_.prefill_s += prefill_s;
    r_.prefill_cpu_s += prefill_cpu.seconds();
    r_.prompt_tokens += static_cast<int64_t>(nb) * cfg_.prompt_tokens;

    // The first new token comes from the prefill's logits; each decode step feeds one token
    // per sequence (greedy, or the text's continuation) and reads the next one's logits.
    Timer decode;
    CpuTimer decode_cpu;
    for (int32_t i = 0; i < nb; ++i) {
      const float* row = logits_.data() + static_cast<size_t>(i) * static_cast<size_t>(vocab_);
      if (teacher) add_nll(row, req_.continuations[static_cast<size_t>(first + i)][0]);
      next_[static_cast<size_t>(i)] = argmax(row, vocab_);
    }
    for (int32_t s = 0; s < cfg_.new_tokens; ++s) {
      for (int32_t i = 0; i < nb; ++i) {
        const size_t si = static_cast<size_t>(i);
        n_tokens_[si] = 1;
        prompt_end_[si] = 0;
        tokens_[si] =
            teacher ? req_.continuations[static_cast<size_t>(first + i)][static_cast<size_t>(s)]
                    : next_[si];
        positions_[si] = cfg_.prompt_tokens + s;
      }
      forward(nb, "decode");
      for (int32_t i = 0; i < nb; ++i) {
        const float* row = logits_.data() + static_cast<size_t>(i) * static_cast<size_t>(vocab_);
        if (teacher) {
          if (s + 1 < cfg_.new_tokens) {
            add_nll(row, req_.continuations[static_cast<size_t>(first + i)]
                                           [static_cast<size_t>(s + 1)]);
          }
        } else {
          next_[static_cast<size_t>(i)] = argmax(row, vocab_);
        }
      }
      if ((s + 1) % 16 == 0 || s + 1 == cfg_.new_tokens) {
        progress.status(wave + ": decode step " + std::to_string(s + 1) + "/" +
                        std::to_string(cfg_.new_tokens) + ", " +
                        fmt("%.1f", static_cast<double>(nb) * (s + 1) / decode.seconds()) +
                        " tok/s");
      }
    }
    const double decode_s = decode.seconds();
    r_.decode_s += decode_s;
    r_.decode_cpu_s += decode_cpu.seconds();
    r_.generated += static_cast<int64_t>(nb) * cfg_.new_tokens;

    const kvc_cache_stats st = check_peak();
    for (int32_t i = 0; i < nb; ++i) {
      check(kvc_seq_remove(cache_.get(), first + i), "kvc_seq_remove");
    }
    r_.total_s += total.seconds();
    ++wave_;
    progress.line(wave + ": prefill " + fmt("%.2f", prefill_s) + " s, decode " +
                  fmt("%.2f", decode_s) + " s; so far " +
                  fmt("%.1f", static_cast<double>(r_.generated) / r_.decode_s) +
                  " decode tok/s, " +
                  fmt("%.2f", static_cast<double>(r_.generated) / r_.total_s) +
                  " end-to-end tok/s; peak KV " + fmt("%.2f", st.bytes_peak / 1048576.0) +
                  " MiB + activations " + fmt("%.2f", r_.activation_bytes / 1048576.0) + " MiB");
  }

  /// The results, once every wave ran.
  ModeResult finish() {
    const kvc_cache_stats st = check_peak();
    r_.bytes_peak = st.bytes_peak;
    r_.tokens_evicted = st.tokens_evicted;
    if (nll_count_ > 0) {
      r_.has_nll = true;
      r_.nll = nll_sum_ / static_cast<double>(nll_count_);
    }
    return r_;
  }

 private:
  // One batched forward call; any error (OUT_OF_MEMORY above all) ends the benchmark.
  void forward(int32_t n, const char* phase) {
    char err[1024] = {0};
    if (kvl_engine_forward_marked(engine_.get(), n, ids_.data(), n_tokens_.data(),
                                  tokens_.data(), positions_.data(), prompt_end_.data(), 0,
                                  logits_.data(), err, sizeof err) != 0) {
      std::string msg = r_.label() + ": kvl_engine_forward_marked (" + phase +
                        ", batch of " + std::to_string(n) + ") failed: " + err;
      if (std::strstr(err, "OUT_OF_MEMORY") != nullptr) {
        msg += " -- the batch sized by kvc_cache_estimate did not fit the limit";
      }
      throw Error(msg);
    }
  }

  kvc_cache_stats check_peak() const {
    const kvc_cache_stats st = get_stats(cache_.get());
    if (st.bytes_peak > kv_limit_) {
      throw Error(r_.label() + ": stats.bytes_peak " + std::to_string(st.bytes_peak) +
                  " is over the K/V share of the memory limit " + std::to_string(kv_limit_));
    }
    return st;
  }

  void add_nll(const float* row, int32_t target) {
    nll_sum_ += nll_of(row, vocab_, target);
    ++nll_count_;
  }

  const Config& cfg_;
  ModeSpec spec_;
  size_t kv_limit_ = 0;  // the memory limit less the engine's activation bytes
  const Requests& req_;
  int32_t vocab_;
  CachePtr cache_;
  EnginePtr engine_;
  int32_t batch_ = 0;
  int32_t wave_ = 0;
  ModeResult r_;
  std::vector<int32_t> ids_, n_tokens_, prompt_end_, tokens_, positions_, next_;
  std::vector<float> logits_;
  double nll_sum_ = 0;
  int64_t nll_count_ = 0;
};

// Serves every mode in the first format, and format_modes in the others too; with
// `interleave` the next wave is always one of the run that has served the smallest share of
// its waves, so all runs spread over the same minutes.
std::vector<ModeResult> run_modes(kvc_context* ctx, const kvl_model* model, const Config& cfg,
                                  size_t limit, const Requests& req, Progress& progress) {
  std::vector<std::unique_ptr<ModeRun>> runs;
  for (const std::string& m : cfg.modes) {
    const size_t n_formats = contains(cfg.format_modes, m) ? cfg.formats.size() : 1;
    for (size_t f = 0; f < n_formats; ++f) {
      runs.push_back(std::make_unique<ModeRun>(ctx, model, cfg, mode_spec(m), cfg.formats[f],
                                               f == 0, limit, req));
      const ModeResult& r = runs.back()->result();
      progress.line("batchmax: mode " + r.label() + ": estimate " +
                    std::to_string(r.estimate_bytes) + " bytes per sequence, max batch " +
                    std::to_string(r.max_batch) + " (" + std::to_string(r.waves) +
                    " waves), activations " + std::to_string(r.activation_bytes) + " bytes for " +
                    std::to_string(r.max_batch) + " x " + std::to_string(r.chunk_tokens) +
                    " tokens");
    }
  }
  for (;;) {
    ModeRun* next = nullptr;
    for (auto& run : runs) {
      if (run->done()) continue;
      if (!cfg.interleave) {
        next = run.get();
        break;
      }
      if (next == nullptr || run->fraction_done() < next->fraction_done()) next = run.get();
    }
    if (next == nullptr) break;
    next->run_wave(progress);
  }
  std::vector<ModeResult> results;
  for (auto& run : runs) results.push_back(run->finish());
  return results;
}

// A short untimed run so that the first timed mode does not pay for cold caches and the
// first touch of the weights and the engine's buffers.
void warm_up(kvc_context* ctx, const kvl_model* model, const Config& cfg, const Requests& req) {
  const ModeSpec spec = mode_spec("full");
  CachePtr cache = make_cache(ctx, model, cfg, spec, cfg.formats.front(), size_t{1} << 30);
  kvl_engine* raw = nullptr;
  char err[1024] = {0};
  if (kvl_engine_create(model, cache.get(), cfg.chunk_tokens, &raw, err, sizeof err) != 0) {
    throw Error(std::string("kvl_engine_create: ") + err);
  }
  EnginePtr engine(raw);
  check(kvc_seq_create(cache.get(), 0), "kvc_seq_create");
  const int32_t len = std::min(cfg.chunk_tokens, cfg.prompt_tokens);
  std::vector<int32_t> tokens(req.prompts[0].begin(), req.prompts[0].begin() + len);
  std::vector<int32_t> positions(static_cast<size_t>(len));
  for (int32_t i = 0; i < len; ++i) positions[static_cast<size_t>(i)] = i;
  std::vector<float> logits(static_cast<size_t>(kvl_model_config(model)->vocab_size));
  const int32_t id = 0;
  auto forward = [&](const int32_t* n, const int32_t* toks, const int32_t* pos) {
    if (kvl_engine_forward(engine.get(), 1, &id, n, toks, pos, 0, logits.data(), err,
                           sizeof err) != 0) {
      throw Error(std::string("kvl_engine_forward (warm-up): ") + err);
    }
  };
  forward(&len, tokens.data(), positions.data());
  const int32_t one = 1;
  for (int32_t s = 0; s < 8; ++s) {
    const int32_t t = argmax(logits.data(), static_cast<int32_t>(logits.size()));
    const int32_t pos = len + s;
    forward(&one, &t, &pos);
  }
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

// Each mode run in another format over the same mode in the first: batch, decode-phase and
// end-to-end tokens/s, and the difference of the continuation NLL.
void report_vs_first_format(const std::vector<ModeResult>& results, const KvFormats& first) {
  for (const ModeResult& r : results) {
    if (r.base_format) continue;
    const auto base = std::find_if(results.begin(), results.end(), [&](const ModeResult& b) {
      return b.base_format && b.mode == r.mode;
    });
    const std::string p = "batchmax_" + r.key() + "_";
    const std::string vs = "_vs_" + first.key();
    report(p + "batch_ratio" + vs, ratio(r.max_batch, base->max_batch));
    report(p + "decode_throughput_ratio" + vs,
           ratio(r.decode_tokens_per_s(), base->decode_tokens_per_s()));
    report(p + "throughput_ratio" + vs,
           ratio(r.end_to_end_tokens_per_s(), base->end_to_end_tokens_per_s()));
    if (r.has_nll && base->has_nll) report(p + "nll_delta" + vs, r.nll - base->nll);
  }
}

// per_chunk_demote over per_chunk, in each format both ran in: batch, decode-phase and
// end-to-end tokens/s, and the difference of the continuation NLL.
void report_demote_vs_per_chunk(const std::vector<ModeResult>& results) {
  for (const ModeResult& r : results) {
    if (r.mode != "per_chunk_demote") continue;
    const auto base = std::find_if(results.begin(), results.end(), [&](const ModeResult& b) {
      return b.mode == "per_chunk" && b.formats == r.formats;
    });
    if (base == results.end()) continue;
    const std::string p = "batchmax_" + r.key() + "_";
    report(p + "batch_ratio_vs_per_chunk", ratio(r.max_batch, base->max_batch));
    report(p + "decode_throughput_ratio_vs_per_chunk",
           ratio(r.decode_tokens_per_s(), base->decode_tokens_per_s()));
    report(p + "throughput_ratio_vs_per_chunk",
           ratio(r.end_to_end_tokens_per_s(), base->end_to_end_tokens_per_s()));
    if (r.has_nll && base->has_nll) report(p + "nll_delta_vs_per_chunk", r.nll - base->nll);
  }
}

// per_chunk's batch, decode-phase and end-to-end tokens/s over the best of the other modes for
// each figure: first the lines naming those modes, then the three ratios.
void report_vs_best_other(const std::vector<ModeResult>& results, const ModeResult& chunk) {
  struct Figure {
    const char* name;
    double (*of)(const ModeResult&);
    const ModeResult* best;
  };
  Figure figures[] = {
      {"batch", [](const ModeResult& r) { return static_cast<double>(r.max_batch); }, nullptr},
      {"decode_throughput", [](const ModeResult& r) { return r.decode_tokens_per_s(); }, nullptr},
      {"throughput", [](const ModeResult& r) { return r.end_to_end_tokens_per_s(); }, nullptr},
  };
  for (Figure& f : figures) {
    for (const ModeResult& r : results) {
      if (&r != &chunk && r.base_format && r.mode != "per_chunk_demote" &&
          (f.best == nullptr || f.of(r) > f.of(*f.best))) {
        f.best = &r;
      }
    }
    report(std::string("batchmax_best_other_") + f.name + "_mode", f.best->mode);
  }
  for (const Figure& f : figures) {
    report(std::string("batchmax_") + f.name + "_ratio_vs_best_other",
           ratio(f.of(chunk), f.of(*f.best)));
  }
}

}  // namespace

int run_batchmax(Options& opts) {
  Config cfg = read_config(opts);
  Progress progress(cfg.progress);
  report_machine();  // the load as the run starts: throughput figures move with it

  // The model: random weights of the configured shape, a llama2.c checkpoint or a GGUF file.
  char err[1024] = {0};
  kvl_model* raw_model = nullptr;
  const bool real = !cfg.model_path.empty();
  if (real) {
    if (kvl_model_load(cfg.model_path.c_str(), &raw_model, err, sizeof err) != 0) {
      throw Error(std::string("kvl_model_load: ") + err);
    }
  } else {
    cfg.shape.seq_len = cfg.prompt_tokens + cfg.new_tokens;
    if (kvl_model_random(&cfg.shape, cfg.seed, &raw_model, err, sizeof err) != 0) {
      throw Error(std::string("kvl_model_random: ") + err);
    }
  }
  ModelPtr model(raw_model);
  const kvl_config mc = *kvl_model_config(model.get());
  for (const KvFormats& f : cfg.formats) check_head_dim(f, mc.dim / mc.n_heads);
  if (cfg.demote) check_head_dim(cfg.demote_formats, mc.dim / mc.n_heads);

  std::vector<std::string> notes;
  if (real && cfg.prompt_tokens + cfg.new_tokens > mc.seq_len) {
    const int32_t clamped = mc.seq_len - cfg.new_tokens;
    if (clamped < 2) {
      throw UsageError("the checkpoint's seq_len " + std::to_string(mc.seq_len) +
                       " leaves no room for a prompt before " + std::to_string(cfg.new_tokens) +
                       " new tokens");
    }
    notes.push_back("the checkpoint's seq_len is " + std::to_string(mc.seq_len) +
                    ": prompt clamped from " + std::to_string(cfg.prompt_tokens) + " to " +
                    std::to_string(clamped) + " tokens (seq_len - new_tokens)");
    cfg.prompt_tokens = clamped;
  }
  if (cfg.prompt_tokens % cfg.chunk_tokens == 1) {
    // The cache takes a one-token step for a decode step, not for a prompt chunk.
    throw UsageError("the last prefill chunk would be a single token (prompt_tokens % "
                     "chunk_tokens == 1); pick another --chunk_tokens");
  }
  if (cfg.budget >= cfg.prompt_tokens + cfg.new_tokens) {
    notes.push_back("budget " + std::to_string(cfg.budget) + " >= prompt + new tokens: "
                    "the policy never evicts, every mode keeps the full cache");
  }

  // The requests, the same in every mode.
  Requests req;
  TokenizerPtr tokenizer;
  if (real && !cfg.ids_path.empty()) {
    req = batchmax::token_id_requests(cfg.ids_path, mc.vocab_size, kvl_model_bos(model.get()),
                                      cfg.requests, cfg.prompt_tokens, cfg.new_tokens);
  } else if (real) {
    tokenizer = open_tokenizer(cfg.tokenizer_path, cfg.model_path, mc.vocab_size, cfg.text_path);
    req = batchmax::text_requests(tokenizer.get(), kvl_model_bos(model.get()), cfg.text_path,
                                  cfg.requests, cfg.prompt_tokens, cfg.new_tokens);
  } else {
    req = batchmax::random_requests(cfg.requests, cfg.prompt_tokens, mc.vocab_size, cfg.seed);
  }

  std::string yaml = "threads: " + std::to_string(cfg.threads) + "\n";
  kvc_context* raw_ctx = nullptr;
  check(kvc_context_create(yaml.c_str(), &raw_ctx), "kvc_context_create");
  ContextPtr ctx(raw_ctx);

  // The one memory limit: by default two full-cache sequences, each with the activations of
  // one chunk, plus a margin.
  size_t full_seq_bytes = 0;
  {
    const ModeSpec full = mode_spec("full");
    CachePtr probe =
        make_cache(ctx.get(), model.get(), cfg, full, cfg.formats.front(), size_t{1} << 30);
    full_seq_bytes = estimate(probe.get(), cfg, full) + activation_bytes(model.get(), cfg, full, 1);
  }
  const size_t limit =
      cfg.memory_limit != 0
          ? cfg.memory_limit
          : static_cast<size_t>(cfg.limit_seqs * static_cast<double>(full_seq_bytes));

  for (const std::string& n : notes) progress.line("batchmax: note: " + n);
  progress.line("batchmax: " + std::to_string(cfg.requests) + " requests of " +
                std::to_string(cfg.prompt_tokens) + " prompt + " + std::to_string(cfg.new_tokens) +
                " new tokens, chunk " + std::to_string(cfg.chunk_tokens) + ", memory limit " +
                fmt("%.2f", limit / 1048576.0) + " MiB; " + req.origin);
  warm_up(ctx.get(), model.get(), cfg, req);

  const std::vector<ModeResult> results =
      run_modes(ctx.get(), model.get(), cfg, limit, req, progress);

  // ---- report
  std::string formats_text;
  for (const KvFormats& f : cfg.formats) {
    formats_text += (formats_text.empty() ? "" : ",") + f.name();
  }
  const int32_t head_dim = mc.dim / mc.n_heads;
  std::printf("kvc-bench batchmax: %s model dim %d, hidden %d, %d layers, %d heads (%d KV), "
              "head_dim %d, vocab %d; matrix products by %s\n",
              real ? cfg.model_path.c_str() : "random-weight", mc.dim, mc.hidden_dim, mc.n_layers,
              mc.n_heads, mc.n_kv_heads, head_dim, mc.vocab_size, kvl_model_matmul(model.get()));
  std::printf("%d requests: %d prompt tokens (chunks of %d) + %d new tokens; policy %s, budget %d; "
              "K/V formats %s, paged, block %d\n",
              cfg.requests, cfg.prompt_tokens, cfg.chunk_tokens, cfg.new_tokens, cfg.policy.c_str(),
              cfg.budget, formats_text.c_str(), cfg.block_tokens);
  if (contains(cfg.modes, "per_chunk_demote")) {
    kvc_cache_params defaults;
    kvc_cache_params_init(&defaults);
    std::printf("per_chunk_demote: demotes to %s, keeping %g of the budget in the cache's "
                "format\n",
                cfg.demote_formats.name().c_str(),
                cfg.demote_keep >= 0 ? cfg.demote_keep : defaults.demote_keep);
  }
  std::printf("prompts: %s\n", req.origin.c_str());
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  batchmax::print_table(results, limit);

  report("batchmax_requests", cfg.requests);
  report("batchmax_prompt_tokens", cfg.prompt_tokens);
  report("batchmax_new_tokens", cfg.new_tokens);
  report("batchmax_chunk_tokens", cfg.chunk_tokens);
  report("batchmax_policy", cfg.policy);
  report("batchmax_matmul", std::string(kvl_model_matmul(model.get())));
  report("batchmax_budget", cfg.budget);
  report("batchmax_formats", formats_text);
  report("batchmax_block_tokens", cfg.block_tokens);
  if (contains(cfg.modes, "per_chunk_demote")) {
    report("batchmax_demote", cfg.demote_formats.name());
  }
  report("batchmax_model", real ? cfg.model_path : std::string("random"));
  report("batchmax_dim", mc.dim);
  report("batchmax_hidden_dim", mc.hidden_dim);
  report("batchmax_layers", mc.n_layers);
  report("batchmax_heads", mc.n_heads);
  report("batchmax_kv_heads", mc.n_kv_heads);
  report("batchmax_vocab", mc.vocab_size);
  report("batchmax_memory_limit_bytes", limit);
  const ModeResult* full = nullptr;
  const ModeResult* chunk = nullptr;
  for (const ModeResult& r : results) {
    const std::string p = "batchmax_" + r.key() + "_";
    report_kv_formats(p, r.formats);
    report(p + "chunk_tokens", r.chunk_tokens);
    report(p + "estimate_seq_bytes", r.estimate_bytes);
    report(p + "max_batch", r.max_batch);
    report(p + "waves", r.waves);
    report(p + "peak_kv_bytes", r.bytes_peak);
    report(p + "activation_bytes", r.activation_bytes);
    report(p + "peak_bytes", r.peak_bytes());
    report(p + "tokens_evicted", r.tokens_evicted);
    report(p + "prefill_s", r.prefill_s);
    report(p + "decode_s", r.decode_s);
    report(p + "prefill_cpu_s", r.prefill_cpu_s);
    report(p + "decode_cpu_s", r.decode_cpu_s);
    report(p + "total_s", r.total_s);
    report(p + "prefill_share", ratio(r.prefill_s, r.prefill_s + r.decode_s));
    report(p + "prefill_tokens_per_s", r.prefill_tokens_per_s());
    report(p + "decode_tokens_per_s", r.decode_tokens_per_s());
    report(p + "end_to_end_tokens_per_s", r.end_to_end_tokens_per_s());
    report(p + "decode_tokens_per_cpu_s", r.decode_tokens_per_cpu_s());
    if (r.has_nll) report(p + "nll", r.nll);
    if (r.base_format && r.mode == "full") full = &r;
    if (r.base_format && r.mode == "per_chunk") chunk = &r;
  }
  if (full != nullptr) {
    for (const ModeResult& r : results) {
      if (r.has_nll && full->has_nll && &r != full) {
        report("batchmax_" + r.key() + "_nll_delta_vs_full", r.nll - full->nll);
      }
    }
  }
  report_vs_first_format(results, cfg.formats.front());
  report_demote_vs_per_chunk(results);

  batchmax::write_csv(cfg.csv_path, results, limit);
  report("batchmax_csv", cfg.csv_path);
  const std::string title = "kvc-bench batchmax: " + std::to_string(cfg.requests) + " requests, " +
                            std::to_string(cfg.prompt_tokens) + " prompt + " +
                            std::to_string(cfg.new_tokens) + " new tokens, one memory limit of " +
                            fmt("%.1f", limit / 1048576.0) + " MiB";
  const std::string png_note = batchmax::plot_png(cfg.csv_path, cfg.png_path, title, limit);
  if (png_note.empty()) {
    report("batchmax_png", cfg.png_path);
  } else {
    std::printf("note: %s\n", png_note.c_str());
    std::fflush(stdout);
  }

  if (full != nullptr && chunk != nullptr) {
    // End-to-end ratios where prompt processing is k times cheaper than here (a device whose
    // prefill is compute-efficient while decoding stays bound by memory): prefill time / k.
    for (double k : {10.0, 100.0}) {
      const double other_full = full->total_s - full->prefill_s - full->decode_s;
      const double other_chunk = chunk->total_s - chunk->prefill_s - chunk->decode_s;
      const double t_full = full->prefill_s / k + full->decode_s + other_full;
      const double t_chunk = chunk->prefill_s / k + chunk->decode_s + other_chunk;
      report("batchmax_throughput_ratio_prefill_" + std::to_string(static_cast<int>(k)) +
                 "x_cheaper",
             ratio(static_cast<double>(chunk->generated) / t_chunk,
                   static_cast<double>(full->generated) / t_full));
    }
    // The same ratio in CPU time, a cross-check when other processes share the cores.
    report("batchmax_decode_cpu_throughput_ratio",
           ratio(chunk->decode_tokens_per_cpu_s(), full->decode_tokens_per_cpu_s()));
    report_vs_best_other(results, *chunk);
    report("batchmax_decode_throughput_ratio",
           ratio(chunk->decode_tokens_per_s(), full->decode_tokens_per_s()));
    report("batchmax_batch_ratio", ratio(chunk->max_batch, full->max_batch));
    report("batchmax_throughput_ratio",
           ratio(chunk->end_to_end_tokens_per_s(), full->end_to_end_tokens_per_s()));
  } else {
    std::printf("note: the ratio lines need both the full and the per_chunk mode\n");
  }
  return 0;
}

#endif  // KVC_BENCH_HAVE_LLAMA

}  // namespace kvc_bench
