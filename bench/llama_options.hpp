// The checks of the example engine's options that the kvc-bench subcommands running it
// (batchmax, prefix) share: the random-weight model's shape and the options that need a real
// model. Include only where KVC_BENCH_HAVE_LLAMA is set.
#pragma once

#include <string>

#include "common.hpp"
#include "llama.h"
#include "options.hpp"

namespace kvc_bench {

// `text_given`: --text was on the command line (its default does not count).
inline void check_llama_options(const kvl_config& shape, const std::string& model_path,
                                Options& opts, bool text_given) {
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
