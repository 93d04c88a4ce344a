// kvc-bench batchmax: the requests (prompts and continuations) every mode serves.
#include <algorithm>
#include <cstdint>
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

// Appends the tokens of text[begin, end) (no BOS) to out.
void encode_piece(const kvl_tokenizer* tok, const std::string& text, size_t begin, size_t end,
                  std::vector<int32_t>& out) {
  const std::string piece = text.substr(begin, end - begin);
  if (piece.empty()) return;
  // Byte fallback gives at most one token per byte, plus the dummy prefix.
  std::vector<int32_t> buf(piece.size() + 8);
  const int32_t count = kvl_tokenizer_encode(tok, piece.c_str(), 0, 0, buf.data(),
                                             static_cast<int32_t>(buf.size()));
  if (count < 0) throw Error("kvl_tokenizer_encode: a text piece did not fit its buffer");
  out.insert(out.end(), buf.begin(), buf.begin() + count);
}

}  // namespace

Requests text_requests(const void* tokenizer, const std::string& text_path, int32_t n,
                       int32_t prompt_tokens, int32_t new_tokens) {
  const auto* tok = static_cast<const kvl_tokenizer*>(tokenizer);
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw Error("cannot read the text file '" + text_path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  // llama2.c's encoder is quadratic in its input, so encode pieces of a few hundred bytes
  // split at a space: the encoder's dummy prefix re-creates the dropped space, so the pieces
  // encode like the whole text (a merge can't cross a space in llama2.c's vocabularies).
  const int32_t window = prompt_tokens - 1 + new_tokens;  // text tokens per request
  const size_t needed = static_cast<size_t>(window) * static_cast<size_t>(n);
  std::vector<int32_t> tokens;
  size_t pos = 0;
  bool wrapped = false;
  while (tokens.size() < needed) {
    if (pos >= text.size()) {
      if (tokens.empty()) throw Error("the text file '" + text_path + "' gives no tokens");
      wrapped = true;
      break;
    }
    size_t end = text.find(' ', std::min(text.size(), pos + 256));
    if (end == std::string::npos) end = text.size();
    encode_piece(tok, text, pos, end, tokens);
    pos = end + 1;
  }

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
    p.push_back(1);  // BOS
    while (static_cast<int32_t>(p.size()) < prompt_tokens) p.push_back(take());
    while (static_cast<int32_t>(c.size()) < new_tokens) c.push_back(take());
  }
  r.origin = "text " + text_path + ": " + std::to_string(n) + " consecutive windows of " +
             std::to_string(window) + " tokens (" + std::to_string(pos < text.size() ? pos : text.size()) +
             " bytes encoded" + (wrapped ? ", text too short: windows wrap around" : "") +
             "), teacher-forced continuations";
  return r;
}

#else

Requests text_requests(const void*, const std::string&, int32_t, int32_t, int32_t) {
  throw Error("kvc-bench was built without the llama example engine (kvc_llama)");
}

#endif

}  // namespace batchmax
}  // namespace kvc_bench
