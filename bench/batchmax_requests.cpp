// kvc-bench batchmax: the requests (prompts and continuations) every mode serves.
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "batchmax.hpp"
#include "common.hpp"

#if defined(KVC_BENCH_HAVE_LLAMA)
#include "llama.h"
#endif

namespace kvc_bench {
namespace batchmax {

Requests random_requests(int32_t n, int32_t prompt_tokens, int32_t vocab, uint64_t seed) {
  Requests r;
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
  auto next = [&state]() {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t span = vocab > 3 ? static_cast<uint64_t>(vocab - 3) : 1;
  r.prompts.resize(static_cast<size_t>(n));
  for (auto& p : r.prompts) {
    p.resize(static_cast<size_t>(prompt_tokens));
    for (int32_t& t : p) t = static_cast<int32_t>(3 + next() % span);
    if (!p.empty()) p[0] = 1;  // BOS, as a real prompt starts
  }
  r.origin = "random tokens (seed " + std::to_string(seed) + "), greedy decoding";
  return r;
}

#if defined(KVC_BENCH_HAVE_LLAMA)

namespace {

// Consecutive windows of `tokens` (wrapping around when they are too few); `source` starts
// the origin line.
Requests windows_of(const std::vector<int32_t>& tokens, int32_t bos, int32_t n,
                    int32_t prompt_tokens, int32_t new_tokens, const std::string& source) {
  const int32_t prompt_text = bos >= 0 ? prompt_tokens - 1 : prompt_tokens;
  const int32_t window = prompt_text + new_tokens;  // text tokens per request
  Requests r;
  r.prompts.resize(static_cast<size_t>(n));
  r.continuations.resize(static_cast<size_t>(n));
  size_t at = 0;
  auto take = [&]() {
    const int32_t t = tokens[at];
    at = (at + 1) % tokens.size();
    return t;
  };
  for (int32_t i = 0; i < n; ++i) {
    auto& p = r.prompts[static_cast<size_t>(i)];
    auto& c = r.continuations[static_cast<size_t>(i)];
    if (bos >= 0) p.push_back(bos);
    while (static_cast<int32_t>(p.size()) < prompt_tokens) p.push_back(take());
    while (static_cast<int32_t>(c.size()) < new_tokens) c.push_back(take());
  }
  const bool wrapped = static_cast<int64_t>(window) * n > static_cast<int64_t>(tokens.size());
  r.origin = source + " (" + std::to_string(tokens.size()) + " tokens): " + std::to_string(n) +
             " consecutive windows of " + std::to_string(window) + " tokens" +
             (bos >= 0 ? ", each prompt after BOS " + std::to_string(bos) : ", no BOS") +
             (wrapped ? ", text too short: windows wrap around" : "") +
             ", teacher-forced continuations";
  return r;
}

}  // namespace

Requests text_requests(const void* tokenizer, int32_t bos, const std::string& text_path,
                       int32_t n, int32_t prompt_tokens, int32_t new_tokens) {
  const auto* tok = static_cast<const kvl_tokenizer*>(tokenizer);
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw Error("cannot read the text file '" + text_path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.size() > INT32_MAX - 8) throw Error("the text file '" + text_path + "' is too large");
  // Either encoder gives at most one token per byte, plus llama2.c's dummy prefix.
  std::vector<int32_t> tokens(text.size() + 8);
  const int32_t count = kvl_tokenizer_encode(tok, text.c_str(), 0, 0, tokens.data(),
                                             static_cast<int32_t>(tokens.size()));
  if (count < 0) throw Error("the tokenizer cannot encode the text file '" + text_path + "'");
  if (count == 0) throw Error("the text file '" + text_path + "' gives no tokens");
  tokens.resize(static_cast<size_t>(count));
  return windows_of(tokens, bos, n, prompt_tokens, new_tokens, "text " + text_path);
}

Requests token_id_requests(const std::string& ids_path, int32_t vocab, int32_t bos, int32_t n,
                           int32_t prompt_tokens, int32_t new_tokens) {
  int32_t* ids = nullptr;
  int32_t count = 0;
  char err[1024] = {0};
  if (kvl_token_ids_read(ids_path.c_str(), vocab, &ids, &count, err, sizeof err) != 0) {
    throw Error(std::string("--token_ids: ") + err);
  }
  const std::vector<int32_t> tokens(ids, ids + count);
  std::free(ids);
  return windows_of(tokens, bos, n, prompt_tokens, new_tokens, "token ids " + ids_path);
}

#else

Requests text_requests(const void*, int32_t, const std::string&, int32_t, int32_t, int32_t) {
  throw Error("kvc-bench was built without the llama example engine (kvc_llama)");
}

Requests token_id_requests(const std::string&, int32_t, int32_t, int32_t, int32_t, int32_t) {
  throw Error("kvc-bench was built without the llama example engine (kvc_llama)");
}

#endif

}  // namespace batchmax
}  // namespace kvc_bench
