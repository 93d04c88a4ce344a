// The llama2.c example engine's prompt_end marks (kvl_engine_forward_marked) and the bytes of
// its activation buffers (kvl_engine_activation_bytes).
//
// With prefill `once`, a whole-prompt prefill marked as the prompt's end compresses each layer
// right after its attention over the prompt; unmarked, the same layer is compressed when the
// first decode token arrives. Both compress from the same statistics, so they keep the same
// tokens: on stories260K the first-token and decode logits must be identical, bit for bit,
// while the marked cache peaks lower (one layer holding the whole prompt, not all of them).
//
// The model lives outside the repository (KVC_SHARED_DIR, by default ../shared); the test cases
// that need it form the test suite "shared". Without it main() runs the others and exits 77,
// which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "kvcache/kvcache.h"
#include "llama.h"
#include "status_check.hpp"

#ifndef KVL_TEST_MODEL_DIR
#error "KVL_TEST_MODEL_DIR must name the stories260K folder"
#endif
#ifndef KVL_TEST_DATA_DIR
#error "KVL_TEST_DATA_DIR must name the shared data folder"
#endif

namespace {

const std::string kModelPath = std::string(KVL_TEST_MODEL_DIR) + "/stories260K.bin";
const std::string kTokenizerPath = std::string(KVL_TEST_MODEL_DIR) + "/tok512.bin";
const std::string kTextPath = std::string(KVL_TEST_DATA_DIR) + "/tom_sawyer.txt";

struct ModelDeleter {
  void operator()(kvl_model* m) const { kvl_model_free(m); }
};
using ModelPtr = std::unique_ptr<kvl_model, ModelDeleter>;

// Two prompts of different lengths cut from the text: BOS, then its tokens.
std::vector<std::vector<int32_t>> text_prompts(int32_t vocab, const std::vector<int32_t>& lengths) {
  kvl_tokenizer* tok = nullptr;
  char error[512] = "";
  REQUIRE_MESSAGE(kvl_tokenizer_load(kTokenizerPath.c_str(), vocab, &tok, error, sizeof error) == 0,
                  error);
  std::ifstream in(kTextPath);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(text.size() > 6000);
  std::vector<int32_t> ids(8192);
  const int32_t n = kvl_tokenizer_encode(tok, text.substr(0, 6000).c_str(), 1, 0, ids.data(),
                                         static_cast<int32_t>(ids.size()));
  kvl_tokenizer_free(tok);
  std::vector<std::vector<int32_t>> prompts;
  int32_t at = 1;
  for (int32_t len : lengths) {
    REQUIRE(at + len <= n);
    std::vector<int32_t> p{1};
    p.insert(p.end(), ids.begin() + at, ids.begin() + at + len - 1);
    prompts.push_back(p);
    at += len;
  }
  return prompts;
}

// A cache with prefill `once` and an engine for steps of up to max_tokens tokens.
class Run {
 public:
  Run(const kvl_model* model, int32_t budget, int32_t max_tokens) {
    KVL_REQUIRE_OK(kvc_context_create(nullptr, &context_));
    kvc_cache_params p;
    kvl_cache_params_for(model, &p);
    p.dtype = KVC_DTYPE_F16;
    p.layout = KVC_LAYOUT_PAGED;
    p.block_tokens = 16;
    p.policy = "snapkv";
    p.budget = budget;
    p.prefill = KVC_PREFILL_ONCE;
    KVL_REQUIRE_OK(kvc_cache_create(context_, &p, &cache_));
    char error[512] = "";
    const int rc = kvl_engine_create(model, cache_, max_tokens, &engine_, error, sizeof error);
    REQUIRE_MESSAGE(rc == 0, error);
  }
  ~Run() {
    kvl_engine_free(engine_);
    kvc_cache_destroy(cache_);
    kvc_context_destroy(context_);
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // One step of the given sequences; `prompt_end` empty: kvl_engine_forward (unmarked).
  std::vector<float> forward(const std::vector<int32_t>& ids, const std::vector<int32_t>& n,
                             const std::vector<int32_t>& tokens,
                             const std::vector<int32_t>& positions,
                             const std::vector<int32_t>& prompt_end, int32_t vocab) {
    std::vector<float> logits(ids.size() * static_cast<size_t>(vocab));
    char error[512] = "";
    const int32_t n_seqs = static_cast<int32_t>(ids.size());
    const int rc =
        prompt_end.empty()
            ? kvl_engine_forward(engine_, n_seqs, ids.data(), n.data(), tokens.data(),
                                 positions.data(), 0, logits.data(), error, sizeof error)
            : kvl_engine_forward_marked(engine_, n_seqs, ids.data(), n.data(), tokens.data(),
                                        positions.data(), prompt_end.data(), 0, logits.data(),
                                        error, sizeof error);
    REQUIRE_MESSAGE(rc == 0, error);
    return logits;
  }

  int32_t length(int32_t seq, int32_t layer) const {
    int32_t n = -1;
    KVL_REQUIRE_OK(kvc_seq_length(cache_, seq, layer, 0, &n));
    return n;
  }
  size_t bytes_peak() const {
    kvc_cache_stats st{};
    st.struct_size = sizeof st;
    KVL_REQUIRE_OK(kvc_cache_get_stats(cache_, &st));
    return st.bytes_peak;
  }
  size_t estimate(int32_t prompt, int32_t new_tokens, bool marked) const {
    kvc_estimate_request request;
    kvc_estimate_request_init(&request, prompt, prompt, new_tokens);
    request.marks_prompt_end = marked ? 1 : 0;
    size_t bytes = 0;
    KVL_REQUIRE_OK(kvc_cache_estimate(cache_, &request, &bytes));
    return bytes;
  }
  kvc_cache* cache() const { return cache_; }

 private:
  kvc_context* context_ = nullptr;
  kvc_cache* cache_ = nullptr;
  kvl_engine* engine_ = nullptr;
};

int32_t argmax(const float* row, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

}  // namespace

TEST_SUITE_BEGIN("shared");

TEST_CASE("llama prompt_end: a marked whole-prompt prefill gives the same logits, peaking lower") {
  kvl_model* raw = nullptr;
  char error[512] = "";
  REQUIRE_MESSAGE(kvl_model_load(kModelPath.c_str(), &raw, error, sizeof error) == 0, error);
  ModelPtr model(raw);
  const kvl_config& c = *kvl_model_config(model.get());
  const int32_t vocab = c.vocab_size, budget = 64, steps = 24;
  const std::vector<int32_t> ids = {3, 8}, lengths = {300, 257};
  const std::vector<std::vector<int32_t>> prompts = text_prompts(vocab, lengths);
  std::vector<int32_t> tokens, positions;
  for (const std::vector<int32_t>& p : prompts) {
    tokens.insert(tokens.end(), p.begin(), p.end());
    for (int32_t i = 0; i < static_cast<int32_t>(p.size()); ++i) positions.push_back(i);
  }
  const int32_t total = static_cast<int32_t>(tokens.size());

  Run marked(model.get(), budget, total), unmarked(model.get(), budget, total);
  for (Run* run : {&marked, &unmarked}) {
    for (int32_t id : ids) KVL_REQUIRE_OK(kvc_seq_create(run->cache(), id));
  }
  std::vector<float> logits_marked = marked.forward(ids, lengths, tokens, positions, {1, 1}, vocab);
  std::vector<float> logits_unmarked = unmarked.forward(ids, lengths, tokens, positions, {}, vocab);
  CHECK(logits_marked == logits_unmarked);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int32_t layer = 0; layer < c.n_layers; ++layer) {
      CAPTURE(layer);
      CHECK(marked.length(ids[i], layer) == budget);  // compressed right after its attention
      CHECK(unmarked.length(ids[i], layer) == lengths[i]);
    }
  }

  for (int32_t s = 0; s < steps; ++s) {
    CAPTURE(s);
    std::vector<int32_t> next, pos;
    for (size_t i = 0; i < ids.size(); ++i) {
      next.push_back(argmax(&logits_marked[i * static_cast<size_t>(vocab)], vocab));
      pos.push_back(lengths[i] + s);
    }
    logits_marked = marked.forward(ids, {1, 1}, next, pos, {}, vocab);
    logits_unmarked = unmarked.forward(ids, {1, 1}, next, pos, {}, vocab);
    REQUIRE(logits_marked == logits_unmarked);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    CHECK(marked.length(ids[i], c.n_layers - 1) == budget + steps);
    CHECK(unmarked.length(ids[i], c.n_layers - 1) == budget + steps);
  }

  MESSAGE("bytes_peak marked " << marked.bytes_peak() << ", unmarked " << unmarked.bytes_peak());
  CHECK(marked.bytes_peak() < unmarked.bytes_peak());
  // The library's estimates of one sequence, summed over the two, are what the caches held.
  CHECK(marked.bytes_peak() ==
        marked.estimate(lengths[0], steps, true) + marked.estimate(lengths[1], steps, true));
  CHECK(unmarked.bytes_peak() ==
        unmarked.estimate(lengths[0], steps, false) + unmarked.estimate(lengths[1], steps, false));
}

TEST_SUITE_END();

TEST_CASE("llama engine: activation bytes are the buffers of its steps") {
  kvl_config c{};
  c.dim = 64, c.hidden_dim = 176, c.n_layers = 2, c.n_heads = 8, c.n_kv_heads = 2;
  c.vocab_size = 300, c.seq_len = 128, c.shared_classifier = 1;
  kvl_model* raw = nullptr;
  char error[512] = "";
  REQUIRE_MESSAGE(kvl_model_random(&c, 5, &raw, error, sizeof error) == 0, error);
  ModelPtr model(raw);
  const size_t head_dim = 8, kv_dim = 16;
  // With oneDNN, each of the products' threads (one per core) has a buffer for one slice's
  // outputs: [tokens, slice], the slice at most the widest matrix (the 300-token classifier,
  // in blocks of 64 outputs: 320), and cut to 65536 floats unless one block needs more.
  const bool onednn = std::string(kvl_model_matmul(model.get())) == "onednn";
  const size_t threads = std::min<long>(std::max<long>(sysconf(_SC_NPROCESSORS_ONLN), 1), 64);
  auto slice_buffers = [&](size_t tokens) -> size_t {
    if (!onednn) return 0;
    const size_t floats = std::min(tokens * 320, std::max<size_t>(65536, tokens * 64));
    return threads * floats * sizeof(float);
  };
  // Per token: residual, normalised, queries and attention output [dim], keys and values
  // [kv_dim], the two FFN halves [hidden]; once: RoPE's cos and sin and its frequencies.
  auto expected = [&](size_t tokens) {
    return tokens * (4 * 64 + 2 * kv_dim + 2 * 176) * sizeof(float) +
           head_dim * sizeof(float) + head_dim / 2 * sizeof(double) + slice_buffers(tokens);
  };
  for (int32_t tokens : {1, 7, 256}) {
    CAPTURE(tokens);
    CHECK(kvl_engine_activation_bytes(model.get(), tokens) ==
          expected(static_cast<size_t>(tokens)));
  }
  CHECK(kvl_engine_activation_bytes(model.get(), 0) == 0);
  CHECK(kvl_engine_activation_bytes(nullptr, 16) == 0);
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  std::string missing;
  for (const std::string& path : {kModelPath, kTokenizerPath, kTextPath}) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      missing = path;
      break;
    }
  }
  if (!missing.empty()) context.addFilter("test-suite-exclude", "shared");
  const int rc = context.run();
  if (rc != 0 || context.shouldExit() || missing.empty()) return rc;
  std::printf("skipped: %s not found; ran only the test cases that do not need it\n",
              missing.c_str());
  return 77;
}
