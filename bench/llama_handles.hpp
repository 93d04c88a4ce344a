// What the kvc-bench subcommands that run the llama example engine (batchmax, prefix) share:
// owning handles of the library's and the engine's objects, greedy token choice and the
// tokenizer opened (a GGUF file's own, or the one beside a llama2.c checkpoint). Include only
// where KVC_BENCH_HAVE_LLAMA is set.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common.hpp"
#include "kvcache/kvcache.h"
#include "llama.h"

namespace kvc_bench {

struct ContextDeleter {
  void operator()(kvc_context* c) const { kvc_context_destroy(c); }
};
struct CacheDeleter {
  void operator()(kvc_cache* c) const { kvc_cache_destroy(c); }
};
struct ModelDeleter {
  void operator()(kvl_model* m) const { kvl_model_free(m); }
};
struct EngineDeleter {
  void operator()(kvl_engine* e) const { kvl_engine_free(e); }
};
struct TokenizerDeleter {
  void operator()(kvl_tokenizer* t) const { kvl_tokenizer_free(t); }
};
using ContextPtr = std::unique_ptr<kvc_context, ContextDeleter>;
using CachePtr = std::unique_ptr<kvc_cache, CacheDeleter>;
using ModelPtr = std::unique_ptr<kvl_model, ModelDeleter>;
using EnginePtr = std::unique_ptr<kvl_engine, EngineDeleter>;
using TokenizerPtr = std::unique_ptr<kvl_tokenizer, TokenizerDeleter>;

inline bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
inline bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
inline std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

/// The tokenizer of a llama2.c checkpoint: tok<vocab>.bin or tokenizer.bin beside it; throws
/// UsageError asking for --tokenizer otherwise.
inline std::string find_tokenizer(const std::string& model_path, int32_t vocab) {
  const std::string dir = dir_of(model_path);
  for (const std::string& name :
       {"tok" + std::to_string(vocab) + ".bin", std::string("tokenizer.bin")}) {
    if (is_file(dir + "/" + name)) return dir + "/" + name;
  }
  throw UsageError("--model needs --tokenizer: no tok" + std::to_string(vocab) +
                   ".bin or tokenizer.bin beside " + model_path);
}

/// The tokenizer of a real model: @p tokenizer_path, or when it is empty (then set) the GGUF
/// file's own vocabulary or the llama2.c tokenizer beside the checkpoint; throws Error when it
/// cannot be loaded or the text file @p text_path (which it will encode) does not exist.
inline TokenizerPtr open_tokenizer(std::string& tokenizer_path, const std::string& model_path,
                                   int32_t vocab, const std::string& text_path) {
  if (tokenizer_path.empty()) {
    tokenizer_path = kvl_model_is_gguf(model_path.c_str()) ? model_path
                                                           : find_tokenizer(model_path, vocab);
  }
  char err[1024] = {0};
  kvl_tokenizer* raw = nullptr;
  if (kvl_tokenizer_load(tokenizer_path.c_str(), vocab, &raw, err, sizeof err) != 0) {
    throw Error(std::string("kvl_tokenizer_load: ") + err);
  }
  TokenizerPtr tokenizer(raw);
  if (!is_file(text_path)) throw Error("the text file '" + text_path + "' does not exist");
  return tokenizer;
}

/// The first index of the largest value (0 when row[0] is NaN), as a scan keeping the best index
/// would give. That scan reloads row[best] on every element, a dependency chain of about 13
/// cycles per element, a visible part of a decode step over a 32000-token vocabulary.
/// Independent lane maxima first (vectorised), then the first index that holds the maximum.
inline int32_t argmax(const float* row, int32_t n) {
  constexpr int32_t kLanes = 16;
  float lane[kLanes];
  for (float& m : lane) m = row[0];
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int32_t j = 0; j < kLanes; ++j) lane[j] = row[i + j] > lane[j] ? row[i + j] : lane[j];
  }
  float most = row[0];
  for (const float m : lane) most = m > most ? m : most;
  for (; i < n; ++i) most = row[i] > most ? row[i] : most;
  for (int32_t k = 0; k < n; ++k) {
    if (row[k] == most) return k;
  }
  return 0;
}

}  // namespace kvc_bench
