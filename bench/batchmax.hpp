// kvc-bench batchmax: the pieces shared by batchmax.cpp (the run), batchmax_requests.cpp
// (prompts from random tokens or from a text) and batchmax_output.cpp (table, CSV, plot).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kv_formats.hpp"

namespace kvc_bench {
namespace batchmax {

/// The requests served in every mode: the same prompts, so the modes do the same work.
struct Requests {
  /// [n][prompt_tokens] token ids of each prompt.
  std::vector<std::vector<int32_t>> prompts;
  /// [n][new_tokens] the text that follows each prompt (teacher forcing); empty when the
  /// prompts are random tokens and decoding is greedy.
  std::vector<std::vector<int32_t>> continuations;
  /// Human-readable origin, for the report ("random tokens", "text FILE, ...").
  std::string origin;
};

/// @p n prompts of @p prompt_tokens random ids in [3, vocab) (0..2 are llama2.c's special
/// tokens), reproducible from @p seed.
Requests random_requests(int32_t n, int32_t prompt_tokens, int32_t vocab, uint64_t seed);

/// The whole of @p text_path encoded with the engine's tokenizer (`tokenizer`, a
/// kvl_tokenizer*: llama2.c's or a GGUF file's byte-level BPE), cut into consecutive windows:
/// each prompt is @p bos (when >= 0; -1 for a model without the BOS convention) followed by
/// text tokens up to prompt_tokens, its continuation the next new_tokens tokens. Windows wrap
/// around a text too short for them (noted in `origin`). Throws Error when the file cannot be
/// read or yields no tokens.
Requests text_requests(const void* tokenizer, int32_t bos, const std::string& text_path,
                       int32_t n, int32_t prompt_tokens, int32_t new_tokens);

/// text_requests for a text already encoded: @p ids_path holds whitespace-separated decimal
/// token ids (kvl_token_ids_read, each checked against @p vocab), as kvc-llama's --token-ids.
Requests token_id_requests(const std::string& ids_path, int32_t vocab, int32_t bos, int32_t n,
                           int32_t prompt_tokens, int32_t new_tokens);

/// What one mode measured.
struct ModeResult {
  std::string mode;            ///< full, once, once_layerwise, per_chunk(_demote)
  KvFormats formats;           ///< the cache's K and V formats
  bool base_format = true;     ///< formats is the first of --formats, which every mode runs in
  std::string policy;          ///< "-" for full
  std::string prefill;         ///< none, once, per_chunk
  int32_t chunk_tokens = 0;    ///< prompt tokens per prefill call and sequence
  size_t estimate_bytes = 0;   ///< kvc_cache_estimate per sequence
  /// The largest batch whose estimates and activations fit the limit, at most the requests.
  int32_t max_batch = 0;
  int32_t waves = 0;
  size_t activation_bytes = 0; ///< the engine's buffers for max_batch x chunk_tokens tokens
  size_t bytes_peak = 0;       ///< stats.bytes_peak of the cache over the whole mode
  uint64_t tokens_evicted = 0; ///< stats.tokens_evicted at the end
  double prefill_s = 0;        ///< time in prefill forward calls
  double decode_s = 0;         ///< time in decode forward calls
  double total_s = 0;          ///< wall time of the whole mode (prefill + decode + bookkeeping)
  double prefill_cpu_s = 0;    ///< CPU time of the process (all threads) during prefill
  double decode_cpu_s = 0;     ///< CPU time of the process (all threads) during decode
  int64_t prompt_tokens = 0;   ///< prompt tokens processed, all requests
  int64_t generated = 0;       ///< decode steps, all requests (new tokens generated)
  bool has_nll = false;
  double nll = 0;              ///< mean NLL (nats/token) of the teacher-forced continuations

  /// The row's name in the report lines: the mode, followed by "_<formats.key()>" for a
  /// format other than the first ("per_chunk", "per_chunk_q8_0_q4_0").
  std::string key() const { return base_format ? mode : mode + "_" + formats.key(); }
  /// "per_chunk q8_0/q4_0", for progress and errors.
  std::string label() const { return mode + " " + formats.name(); }
  /// Peak memory: the cache's K/V and the engine's activation buffers.
  size_t peak_bytes() const { return bytes_peak + activation_bytes; }
  double decode_tokens_per_s() const { return decode_s > 0 ? generated / decode_s : 0; }
  double prefill_tokens_per_s() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0; }
  double end_to_end_tokens_per_s() const { return total_s > 0 ? generated / total_s : 0; }
  /// Generated tokens per CPU-second of decoding (less sensitive to other processes' load).
  double decode_tokens_per_cpu_s() const { return decode_cpu_s > 0 ? generated / decode_cpu_s : 0; }
};

/// Prints the results as an aligned table on stdout.
void print_table(const std::vector<ModeResult>& results, size_t memory_limit);

/// Writes the results as CSV (a header line, then one line per mode). Throws Error.
void write_csv(const std::string& path, const std::vector<ModeResult>& results,
               size_t memory_limit);

/// Writes a gnuplot script next to @p png_path (same name, ".gp") that plots @p csv_path
/// (with a line at @p memory_limit on the memory panel), and runs `gnuplot` on it. Returns ""
/// on success, otherwise a note saying why no PNG was drawn (gnuplot missing or failing is not
/// an error of the benchmark).
std::string plot_png(const std::string& csv_path, const std::string& png_path,
                     const std::string& title, size_t memory_limit);

}  // namespace batchmax
}  // namespace kvc_bench
