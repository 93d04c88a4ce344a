// The example engine's matrix products (examples/llama/products.c): KVL_MATMUL's choice of
// library, and oneDNN's products (blocked weights, cut into slices of outputs or of rows)
// against BLIS's on the same random model, over a batched prefill (rows >= 64: slices of rows,
// the residual products adding to y), decode steps (a few rows: slices of outputs through the
// per-thread buffers) and all-logits steps. Shapes are chosen so that inputs and outputs are
// not multiples of oneDNN's 16 x 64 blocks. Where oneDNN has no blocked kernel (no AVX-512)
// the comparison cannot run: the program then exits 77 (ctest: skipped) if all else passed;
// ctest runs the choice and the comparison as two tests (kvc.llama_products{,_agree}).
// The forward pass itself is checked against an independent reference in kvc.llama_reference,
// which ctest runs with each library.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "llama.h"
#include "status_check.hpp"

namespace {

bool comparison_skipped = false;

struct ModelDeleter {
  void operator()(kvl_model* m) const { kvl_model_free(m); }
};
using ModelPtr = std::unique_ptr<kvl_model, ModelDeleter>;

kvl_config test_config() {
  kvl_config c{};
  c.dim = 96, c.hidden_dim = 200, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2;
  c.vocab_size = 1000, c.seq_len = 512, c.shared_classifier = 0;
  return c;
}

// Sets KVL_MATMUL (unset for nullptr) for the model made inside, then restores it.
class MatmulChoice {
 public:
  explicit MatmulChoice(const char* value) {
    const char* old = std::getenv("KVL_MATMUL");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv("KVL_MATMUL", value, 1);
    } else {
      unsetenv("KVL_MATMUL");
    }
  }
  ~MatmulChoice() {
    if (had_) {
      setenv("KVL_MATMUL", old_.c_str(), 1);
    } else {
      unsetenv("KVL_MATMUL");
    }
  }
  MatmulChoice(const MatmulChoice&) = delete;
  MatmulChoice& operator=(const MatmulChoice&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

// A random model made under KVL_MATMUL=value; rc and the message are kept for the checks.
struct Made {
  ModelPtr model;
  int rc = 0;
  std::string error;
};
Made make_model(const char* value) {
  MatmulChoice choice(value);
  kvl_config c = test_config();
  kvl_model* raw = nullptr;
  char error[512] = "";
  Made made;
  made.rc = kvl_model_random(&c, 11, &raw, error, sizeof error);
  made.model.reset(raw);
  made.error = error;
  return made;
}

// Runs the same steps on a fresh cache and engine and returns every logit they produced:
// a batched prefill of two prompts (all logits), three batched decode steps, then one step of
// a 70-token chunk for one sequence and a single token for the other, with all logits.
std::vector<float> run(const kvl_model* model) {
  const int32_t vocab = kvl_model_config(model)->vocab_size;
  kvc_context* ctx = nullptr;
  kvc_cache* cache = nullptr;
  kvl_engine* engine = nullptr;
  KVL_REQUIRE_OK(kvc_context_create(nullptr, &ctx));
  kvc_cache_params p;
  kvl_cache_params_for(model, &p);
  p.dtype = KVC_DTYPE_F32;
  KVL_REQUIRE_OK(kvc_cache_create(ctx, &p, &cache));
  char error[512] = "";
  REQUIRE_MESSAGE(kvl_engine_create(model, cache, 256, &engine, error, sizeof error) == 0, error);
  const std::vector<int32_t> ids{0, 1};
  for (int32_t id : ids) KVL_REQUIRE_OK(kvc_seq_create(cache, id));

  std::vector<float> all;
  std::vector<int32_t> length{0, 0};
  auto step = [&](const std::vector<int32_t>& n, int all_logits) {
    std::vector<int32_t> tokens, positions;
    int32_t total = 0;
    for (size_t s = 0; s < n.size(); ++s) {
      for (int32_t t = 0; t < n[s]; ++t) {
        tokens.push_back((length[s] * 37 + t * 11 + static_cast<int32_t>(s) * 5) % vocab);
        positions.push_back(length[s] + t);
      }
      length[s] += n[s];
      total += n[s];
    }
    const size_t rows = all_logits ? static_cast<size_t>(total) : n.size();
    std::vector<float> logits(rows * static_cast<size_t>(vocab));
    REQUIRE_MESSAGE(kvl_engine_forward(engine, 2, ids.data(), n.data(), tokens.data(),
                                       positions.data(), all_logits, logits.data(), error,
                                       sizeof error) == 0,
                    error);
    all.insert(all.end(), logits.begin(), logits.end());
  };
  step({100, 90}, 1);
  for (int i = 0; i < 3; ++i) step({1, 1}, 0);
  step({70, 1}, 1);

  kvl_engine_free(engine);
  kvc_cache_destroy(cache);
  kvc_context_destroy(ctx);
  return all;
}

}  // namespace

TEST_CASE("llama products: KVL_MATMUL names the library, or the model is refused") {
  const Made blis = make_model("blis");
  REQUIRE_MESSAGE(blis.rc == 0, blis.error);
  CHECK(std::string(kvl_model_matmul(blis.model.get())) == "blis");

  const Made unknown = make_model("mkl");
  CHECK(unknown.rc != 0);
  CHECK(unknown.model == nullptr);
  CHECK(unknown.error.find("KVL_MATMUL=mkl") != std::string::npos);

  const Made automatic = make_model(nullptr);
  REQUIRE_MESSAGE(automatic.rc == 0, automatic.error);
  const std::string chosen = kvl_model_matmul(automatic.model.get());
  CHECK((chosen == "onednn" || chosen == "blis"));
  const Made forced = make_model("onednn");
  if (chosen == "onednn") {
    REQUIRE_MESSAGE(forced.rc == 0, forced.error);
    CHECK(std::string(kvl_model_matmul(forced.model.get())) == "onednn");
  } else {
    // Left to itself the engine took BLIS: oneDNN has no blocked kernel here.
    CHECK(forced.rc != 0);
    CHECK(forced.error.find("KVL_MATMUL=onednn") != std::string::npos);
  }
  CHECK(kvl_model_matmul(nullptr) == nullptr);
}

TEST_CASE("llama products: oneDNN's products give BLIS's forward pass") {
  const Made onednn = make_model("onednn");
  if (onednn.rc != 0) {
    MESSAGE("SKIPPED: " << onednn.error);
    comparison_skipped = true;
    return;
  }
  const Made blis = make_model("blis");
  REQUIRE_MESSAGE(blis.rc == 0, blis.error);
  const std::vector<float> a = run(onednn.model.get());
  const std::vector<float> b = run(blis.model.get());
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() == (190 + 3 * 2 + 71) * static_cast<size_t>(1000));
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(std::isfinite(a[i]));
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  MESSAGE("largest difference " << worst << " over logits up to " << scale);
  CHECK(scale > 0.01);
  // Both sum the same products in float, in different orders.
  CHECK(worst <= 1e-5 * std::max(1.0, scale));
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || rc != 0) return rc;
  return comparison_skipped ? 77 : 0;
}
