// The example engine's options that the kvc-bench subcommands running it (batchmax, prefix)
// share: the random-weight model's shape and seed, the model, its tokenizer and the text, read
// and checked. Include only where KVC_BENCH_HAVE_LLAMA is set.
#pragma once

#include <cstdint>
#include <string>

#include "common.hpp"
#include "llama.h"
#include "options.hpp"

namespace kvc_bench {

struct LlamaOptions {
  kvl_config shape{};  ///< of the random-weight model used without --model
  uint64_t seed = 1;
  std::string model_path;
  std::string tokenizer_path;
  std::string text_path;
  std::string ids_path;
  bool text_given = false;  ///< --text was on the command line (its default does not count)
};

/// --dim, --hidden_dim, --layers, --heads, --kv_heads, --vocab (defaults from @p shape; a
/// kv_heads of 0 there: as many as --heads), --seed, --model, --tokenizer, --text and
/// --token_ids.
inline LlamaOptions read_llama_options(Options& opts, const kvl_config& shape) {
  LlamaOptions o;
  o.shape.dim = static_cast<int32_t>(opts.get_int("dim", shape.dim, 2, 1 << 16));
  o.shape.hidden_dim = static_cast<int32_t>(opts.get_int("hidden_dim", shape.hidden_dim, 1, 1 << 18));
  o.shape.n_layers = static_cast<int32_t>(opts.get_int("layers", shape.n_layers, 1, 1024));
  o.shape.n_heads = static_cast<int32_t>(opts.get_int("heads", shape.n_heads, 1, 1024));
  const int32_t kv_heads = shape.n_kv_heads > 0 ? shape.n_kv_heads : o.shape.n_heads;
  o.shape.n_kv_heads = static_cast<int32_t>(opts.get_int("kv_heads", kv_heads, 1, 1024));
  o.shape.vocab_size = static_cast<int32_t>(opts.get_int("vocab", shape.vocab_size, 4, 1 << 22));
  o.shape.shared_classifier = 1;
  o.shape.rope_theta = 10000.0f;
  o.shape.norm_eps = 1e-5f;
  o.seed = static_cast<uint64_t>(opts.get_int("seed", 1, 0, INT64_MAX));
  o.model_path = opts.get_string("model", "");
  o.tokenizer_path = opts.get_string("tokenizer", "");
  o.text_given = opts.has("text");
  o.text_path = opts.get_string("text", "../shared/data/tom_sawyer.txt");
  o.ids_path = opts.get_string("token_ids", "");
  return o;
}

inline void check_llama_options(const LlamaOptions& o, Options& opts) {
  const kvl_config& shape = o.shape;
  const std::string& model_path = o.model_path;
  const bool text_given = o.text_given;
  if (shape.dim % shape.n_heads != 0) throw UsageError("--dim must be a multiple of --heads");
  if (shape.n_heads % shape.n_kv_heads != 0) {
    throw UsageError("--heads must be a multiple of --kv_heads");
  }
  if ((shape.dim / shape.n_heads) % 2 != 0) {
    throw UsageError("the head dimension (--dim / --heads) must be even for RoPE");
  }
  if (model_path.empty() && (opts.has("tokenizer") || text_given || opts.has("token_ids"))) {
    throw UsageError(
        "--tokenizer, --text and --token_ids need --model (a random model has no vocabulary)");
  }
  if (opts.has("token_ids") && (text_given || opts.has("tokenizer"))) {
    throw UsageError("--token_ids is the text already encoded: give it without --text and "
                     "--tokenizer");
  }
}

}  // namespace kvc_bench
