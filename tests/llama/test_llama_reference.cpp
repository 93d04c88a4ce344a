// The llama2.c example engine (examples/llama) against an independent reference.
//
// The reference below is a naive llama2.c forward pass written only for this test: its own
// checkpoint reader, plain loops with double accumulation, full K/V arrays of its own, its own
// RoPE and softmax. The engine under test keeps no K/V: kvcache stores them and computes all
// attention. On stories260K (a real tiny Llama, GQA 8/4) the two must agree: the same greedy
// tokens and logits within 1e-4 at every step, for both storage layouts, for chunked prefill
// and for a batch of sequences of different lengths processed together.
//
// The model lives outside the repository (KVC_SHARED_DIR, by default ../shared); the test cases
// that need it form the test suite "shared". Without it main() runs the others and exits 77,
// which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

namespace fs = std::filesystem;

const std::string kModelPath = std::string(KVL_TEST_MODEL_DIR) + "/stories260K.bin";
const std::string kTokenizerPath = std::string(KVL_TEST_MODEL_DIR) + "/tok512.bin";
const std::string kTextPath = std::string(KVL_TEST_DATA_DIR) + "/tom_sawyer.txt";
constexpr double kTolerance = 1e-4;
constexpr int kGreedySteps = 60;

// ------------------------------------------------------------------ the reference

struct RefModel {
  int dim = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0, seq_len = 0;
  int head_dim = 0, kv_dim = 0;
  std::vector<float> emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls;
};

void read_into(std::ifstream& in, std::vector<float>& v, size_t n) {
  v.resize(n);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  REQUIRE(in.good());
}

RefModel load_reference(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  int32_t h[7];
  in.read(reinterpret_cast<char*>(h), sizeof h);
  RefModel m;
  m.dim = h[0], m.hidden = h[1], m.layers = h[2], m.heads = h[3], m.kv_heads = h[4];
  m.vocab = std::abs(h[5]), m.seq_len = h[6];
  m.head_dim = m.dim / m.heads;
  m.kv_dim = m.head_dim * m.kv_heads;
  const size_t d = m.dim, l = m.layers, hd = m.hidden, kv = m.kv_dim, v = m.vocab;
  read_into(in, m.emb, v * d);
  read_into(in, m.rms_att, l * d);
  read_into(in, m.wq, l * d * d);
  read_into(in, m.wk, l * kv * d);
  read_into(in, m.wv, l * kv * d);
  read_into(in, m.wo, l * d * d);
  read_into(in, m.rms_ffn, l * d);
  read_into(in, m.w1, l * hd * d);
  read_into(in, m.w2, l * d * hd);
  read_into(in, m.w3, l * hd * d);
  read_into(in, m.rms_final, d);
  in.seekg(static_cast<std::streamoff>(m.seq_len * m.head_dim * sizeof(float)), std::ios::cur);
  if (h[5] > 0) {
    m.wcls = m.emb;
  } else {
    read_into(in, m.wcls, v * d);
  }
  return m;
}

// y = W x, W row-major [rows, cols].
std::vector<double> matvec(const float* w, const std::vector<double>& x, int rows) {
  std::vector<double> y(rows, 0.0);
  const size_t cols = x.size();
  for (int r = 0; r < rows; ++r) {
    double s = 0.0;
    for (size_t c = 0; c < cols; ++c) s += static_cast<double>(w[r * cols + c]) * x[c];
    y[r] = s;
  }
  return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const float* weight) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / x.size() + 1e-5);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = weight[i] * (scale * x[i]);
  return out;
}

// RoPE, llama2.c convention: pair (i, i+1) of each head turns by pos * 10000^(-i / head_dim).
void rope(std::vector<double>& v, int head_dim, int pos) {
  for (size_t i = 0; i < v.size(); i += 2) {
    const int j = static_cast<int>(i % head_dim);
    const double angle = pos * std::pow(10000.0, -static_cast<double>(j) / head_dim);
    const double c = std::cos(angle), s = std::sin(angle);
    const double v0 = v[i], v1 = v[i + 1];
    v[i] = v0 * c - v1 * s;
    v[i + 1] = v0 * s + v1 * c;
  }
}

// One sequence decoded token by token, with its own full K/V arrays.
class RefRun {
 public:
  explicit RefRun(const RefModel& m)
      : m_(m),
        k_(static_cast<size_t>(m.layers) * m.seq_len * m.kv_dim),
        v_(static_cast<size_t>(m.layers) * m.seq_len * m.kv_dim) {}

  std::vector<float> step(int token, int pos) {
    REQUIRE(pos < m_.seq_len);
    const size_t d = m_.dim, kv = m_.kv_dim, hd = m_.hidden;
    std::vector<double> x(m_.emb.begin() + token * d, m_.emb.begin() + (token + 1) * d);
    for (int l = 0; l < m_.layers; ++l) {
      std::vector<double> xb = rmsnorm(x, &m_.rms_att[l * d]);
      std::vector<double> q = matvec(&m_.wq[l * d * d], xb, m_.dim);
      std::vector<double> k = matvec(&m_.wk[l * kv * d], xb, m_.kv_dim);
      std::vector<double> v = matvec(&m_.wv[l * kv * d], xb, m_.kv_dim);
      rope(q, m_.head_dim, pos);
      rope(k, m_.head_dim, pos);
      double* kc = &k_[(static_cast<size_t>(l) * m_.seq_len) * kv];
      double* vc = &v_[(static_cast<size_t>(l) * m_.seq_len) * kv];
      std::copy(k.begin(), k.end(), kc + pos * kv);
      std::copy(v.begin(), v.end(), vc + pos * kv);

      std::vector<double> att(d, 0.0);
      const int group = m_.heads / m_.kv_heads;
      for (int h = 0; h < m_.heads; ++h) {
        const int g = h / group;
        std::vector<double> scores(pos + 1);
        double best = -1e300;
        for (int t = 0; t <= pos; ++t) {
          double s = 0.0;
          for (int i = 0; i < m_.head_dim; ++i) {
            s += q[h * m_.head_dim + i] * kc[t * kv + g * m_.head_dim + i];
          }
          scores[t] = s / std::sqrt(static_cast<double>(m_.head_dim));
          best = std::max(best, scores[t]);
        }
        double sum = 0.0;
        for (double& s : scores) sum += (s = std::exp(s - best));
        for (int t = 0; t <= pos; ++t) {
          for (int i = 0; i < m_.head_dim; ++i) {
            att[h * m_.head_dim + i] += scores[t] / sum * vc[t * kv + g * m_.head_dim + i];
          }
        }
      }
      std::vector<double> o = matvec(&m_.wo[l * d * d], att, m_.dim);
      for (size_t i = 0; i < d; ++i) x[i] += o[i];

      xb = rmsnorm(x, &m_.rms_ffn[l * d]);
      std::vector<double> a = matvec(&m_.w1[l * hd * d], xb, m_.hidden);
      std::vector<double> b = matvec(&m_.w3[l * hd * d], xb, m_.hidden);
      for (size_t i = 0; i < hd; ++i) a[i] = a[i] / (1.0 + std::exp(-a[i])) * b[i];
      std::vector<double> f = matvec(&m_.w2[l * d * hd], a, m_.dim);
      for (size_t i = 0; i < d; ++i) x[i] += f[i];
    }
    std::vector<double> logits = matvec(m_.wcls.data(), rmsnorm(x, m_.rms_final.data()), m_.vocab);
    return std::vector<float>(logits.begin(), logits.end());
  }

 private:
  const RefModel& m_;
  std::vector<double> k_, v_;
};

int argmax(const float* v, int n) { return static_cast<int>(std::max_element(v, v + n) - v); }

double max_abs_diff(const float* a, const float* b, int n) {
  double worst = 0.0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

// Greedy decoding from BOS: the logits of every step and the token each picks.
struct Greedy {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;  // tokens[i] = argmax(logits[i]), fed at position i + 1
};

const Greedy& reference_greedy() {
  static const Greedy greedy = [] {
    const RefModel m = load_reference(kModelPath);
    RefRun run(m);
    Greedy g;
    int token = 1;
    for (int pos = 0; pos < kGreedySteps; ++pos) {
      g.logits.push_back(run.step(token, pos));
      token = argmax(g.logits.back().data(), m.vocab);
      g.tokens.push_back(token);
    }
    return g;
  }();
  return greedy;
}

// ------------------------------------------------------------------ engine helpers

struct ModelDeleter {
  void operator()(kvl_model* m) const { kvl_model_free(m); }
};
struct TokenizerDeleter {
  void operator()(kvl_tokenizer* t) const { kvl_tokenizer_free(t); }
};
using ModelPtr = std::unique_ptr<kvl_model, ModelDeleter>;
using TokenizerPtr = std::unique_ptr<kvl_tokenizer, TokenizerDeleter>;

ModelPtr load_model() {
  kvl_model* m = nullptr;
  char error[512] = "";
  REQUIRE_MESSAGE(kvl_model_load(kModelPath.c_str(), &m, error, sizeof error) == 0, error);
  return ModelPtr(m);
}

TokenizerPtr load_tokenizer(int32_t vocab = 512) {
  kvl_tokenizer* t = nullptr;
  char error[512] = "";
  REQUIRE_MESSAGE(kvl_tokenizer_load(kTokenizerPath.c_str(), vocab, &t, error, sizeof error) == 0,
                  error);
  return TokenizerPtr(t);
}

// A context, a cache shaped for the model (f32 storage) and an engine.
class Session {
 public:
  Session(const kvl_model* model, kvc_layout layout, int32_t max_tokens) {
    KVL_REQUIRE_OK(kvc_context_create(nullptr, &context_));
    kvc_cache_params p;
    kvl_cache_params_for(model, &p);
    p.dtype = KVC_DTYPE_F32;
    p.layout = layout;
    p.block_tokens = 8;  // several blocks per head even for short prompts
    KVL_REQUIRE_OK(kvc_cache_create(context_, &p, &cache_));
    char error[512] = "";
    REQUIRE_MESSAGE(
        kvl_engine_create(model, cache_, max_tokens, &engine_, error, sizeof error) == 0, error);
  }
  ~Session() {
    kvl_engine_free(engine_);
    kvc_cache_destroy(cache_);
    kvc_context_destroy(context_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void create(int32_t seq) { KVL_REQUIRE_OK(kvc_seq_create(cache_, seq)); }

  // One forward step; returns the logits ([rows, vocab]).
  std::vector<float> forward(const std::vector<int32_t>& seq_ids, const std::vector<int32_t>& n,
                             const std::vector<int32_t>& tokens,
                             const std::vector<int32_t>& positions, bool all_logits, int vocab) {
    const size_t rows = all_logits ? tokens.size() : seq_ids.size();
    std::vector<float> logits(rows * vocab);
    char error[512] = "";
    REQUIRE_MESSAGE(kvl_engine_forward(engine_, static_cast<int32_t>(seq_ids.size()),
                                       seq_ids.data(), n.data(), tokens.data(), positions.data(),
                                       all_logits ? 1 : 0, logits.data(), error, sizeof error) == 0,
                    error);
    return logits;
  }

  kvc_cache* cache() const { return cache_; }
  kvl_engine* engine() const { return engine_; }

 private:
  kvc_context* context_ = nullptr;
  kvc_cache* cache_ = nullptr;
  kvl_engine* engine_ = nullptr;
};

std::string layout_name(kvc_layout layout) {
  return layout == KVC_LAYOUT_PAGED ? "paged" : "contiguous";
}

std::vector<int32_t> iota(int32_t first, int32_t n) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

// ------------------------------------------------------------------ llama2.c's encode, naively

// run.c's bpe_encode as it is written (a full rescan per merge), to check the engine's heap.
std::vector<int32_t> naive_encode(const std::string& path, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  int32_t max_len = 0;
  in.read(reinterpret_cast<char*>(&max_len), sizeof max_len);
  std::vector<std::string> vocab(512);
  std::vector<float> scores(512);
  std::map<std::string, int32_t> lookup;
  for (int i = 0; i < 512; ++i) {
    int32_t len = 0;
    in.read(reinterpret_cast<char*>(&scores[i]), sizeof(float));
    in.read(reinterpret_cast<char*>(&len), sizeof len);
    vocab[i].resize(len);
    in.read(vocab[i].data(), len);
    lookup.emplace(vocab[i], i);  // the first of duplicates
  }
  auto find = [&](const std::string& s) {
    auto it = lookup.find(s);
    return it == lookup.end() ? -1 : it->second;
  };
  std::vector<int32_t> tokens;
  if (!text.empty()) tokens.push_back(find(" "));
  std::string cp;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((text[i] & 0xC0) != 0x80) cp.clear();
    cp += text[i];
    if (i + 1 < text.size() && (text[i + 1] & 0xC0) == 0x80 && cp.size() < 4) continue;
    const int32_t id = find(cp);
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (unsigned char b : cp) tokens.push_back(b + 3);
    }
    cp.clear();
  }
  for (;;) {
    float best = -1e10f;
    int best_id = -1, best_at = -1;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int32_t id = find(vocab[tokens[i]] + vocab[tokens[i + 1]]);
      if (id >= 0 && scores[id] > best)
        best = scores[id], best_id = id, best_at = static_cast<int>(i);
    }
    if (best_at < 0) break;
    tokens[best_at] = best_id;
    tokens.erase(tokens.begin() + best_at + 1);
  }
  return tokens;
}

std::string decode_all(const kvl_tokenizer* t, const std::vector<int32_t>& tokens) {
  std::string text;
  for (size_t i = 1; i < tokens.size(); ++i)
    text += kvl_tokenizer_decode(t, tokens[i - 1], tokens[i]);
  return text;
}

std::vector<int32_t> encode(const kvl_tokenizer* t, const std::string& text, bool bos) {
  std::vector<int32_t> tokens(text.size() + 3);
  const int32_t n = kvl_tokenizer_encode(t, text.c_str(), bos ? 1 : 0, 0, tokens.data(),
                                         static_cast<int32_t>(tokens.size()));
  REQUIRE(n >= 0);
  tokens.resize(n);
  return tokens;
}

// The first `lines` lines of the text file.
std::string first_lines(const std::string& path, int lines) {
  std::ifstream in(path);
  std::string text, line;
  for (int i = 0; i < lines && std::getline(in, line); ++i) text += line + "\n";
  return text;
}

}  // namespace

// ================================================================== with the model

TEST_SUITE_BEGIN("shared");

TEST_CASE("llama reference: greedy generation from BOS matches, both layouts") {
  const Greedy& ref = reference_greedy();
  ModelPtr model = load_model();
  const int vocab = kvl_model_config(model.get())->vocab_size;
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    CAPTURE(layout_name(layout));
    Session s(model.get(), layout, 1);
    s.create(0);
    int32_t token = 1;
    double worst = 0.0;
    std::vector<int32_t> generated{1};
    for (int pos = 0; pos < kGreedySteps; ++pos) {
      CAPTURE(pos);
      std::vector<float> logits = s.forward({0}, {1}, {token}, {pos}, false, vocab);
      const double diff = max_abs_diff(logits.data(), ref.logits[pos].data(), vocab);
      worst = std::max(worst, diff);
      REQUIRE(diff <= kTolerance);
      token = argmax(logits.data(), vocab);
      REQUIRE(token == ref.tokens[pos]);
      generated.push_back(token);
    }
    MESSAGE(layout_name(layout) << ": " << kGreedySteps << " greedy steps, max |logit - reference| "
                                << worst);
    int32_t length = 0;
    KVL_REQUIRE_OK(kvc_seq_length(s.cache(), 0, 4, 3, &length));
    CHECK(length == kGreedySteps);

    TokenizerPtr tok = load_tokenizer(vocab);
    const std::string text = decode_all(tok.get(), generated);
    MESSAGE("greedy text: " << text);
    CHECK(text.rfind("Once upon a time, there was a little girl named Lily.", 0) == 0);
  }
}

TEST_CASE("llama reference: chunked prefill of a prompt, then decoding") {
  const Greedy& ref = reference_greedy();
  ModelPtr model = load_model();
  const int vocab = kvl_model_config(model.get())->vocab_size;
  // The prompt is BOS and the reference's first 40 greedy tokens, so the teacher-forced logits
  // at position p are the reference's logits of greedy step p.
  const int32_t prompt_len = 41;
  std::vector<int32_t> prompt{1};
  prompt.insert(prompt.end(), ref.tokens.begin(), ref.tokens.begin() + (prompt_len - 1));
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    for (int32_t chunk : {1, 7, 16, prompt_len}) {
      CAPTURE(layout_name(layout));
      CAPTURE(chunk);
      Session s(model.get(), layout, chunk);
      s.create(3);
      for (int32_t at = 0; at < prompt_len; at += chunk) {
        const int32_t n = std::min(chunk, prompt_len - at);
        std::vector<int32_t> tokens(prompt.begin() + at, prompt.begin() + at + n);
        std::vector<float> logits = s.forward({3}, {n}, tokens, iota(at, n), true, vocab);
        for (int32_t i = 0; i < n; ++i) {
          CAPTURE(at + i);
          REQUIRE(max_abs_diff(&logits[static_cast<size_t>(i) * vocab], ref.logits[at + i].data(),
                               vocab) <= kTolerance);
        }
      }
      int32_t token = argmax(ref.logits[prompt_len - 1].data(), vocab);
      for (int pos = prompt_len; pos < kGreedySteps; ++pos) {
        CAPTURE(pos);
        std::vector<float> logits = s.forward({3}, {1}, {token}, {pos}, false, vocab);
        REQUIRE(max_abs_diff(logits.data(), ref.logits[pos].data(), vocab) <= kTolerance);
        token = argmax(logits.data(), vocab);
        REQUIRE(token == ref.tokens[pos]);
      }
    }
  }
}

TEST_CASE("llama reference: a batch of 3 sequences equals running each alone") {
  ModelPtr model = load_model();
  TokenizerPtr tok = load_tokenizer();
  const int vocab = kvl_model_config(model.get())->vocab_size;
  const std::vector<std::string> texts = {
      "Tom had a dog", "Once upon a time, there was a big red ball in the park",
      "The little bird sang a happy song to the sun and the trees every morning"};
  const std::vector<int32_t> ids = {7, 0, 42};  // any distinct ids
  const int decode_steps = 12;
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& t : texts) prompts.push_back(encode(tok.get(), t, true));
  REQUIRE(prompts[0].size() < prompts[1].size());
  REQUIRE(prompts[1].size() < prompts[2].size());

  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    CAPTURE(layout_name(layout));
    // Alone: each prompt in its own cache, then greedy steps.
    std::vector<std::vector<float>> alone_prefill(3);
    std::vector<std::vector<std::vector<float>>> alone_steps(3);
    for (size_t i = 0; i < 3; ++i) {
      const int32_t n = static_cast<int32_t>(prompts[i].size());
      Session s(model.get(), layout, n);
      s.create(1);
      alone_prefill[i] = s.forward({1}, {n}, prompts[i], iota(0, n), true, vocab);
      int32_t token = argmax(&alone_prefill[i][static_cast<size_t>(n - 1) * vocab], vocab);
      for (int step = 0; step < decode_steps; ++step) {
        alone_steps[i].push_back(s.forward({1}, {1}, {token}, {n + step}, false, vocab));
        token = argmax(alone_steps[i].back().data(), vocab);
      }
    }
    // Together: one forward for the three prompts, then batched single-token steps.
    int32_t total = 0;
    std::vector<int32_t> n_tokens, tokens, positions;
    for (const auto& p : prompts) {
      n_tokens.push_back(static_cast<int32_t>(p.size()));
      tokens.insert(tokens.end(), p.begin(), p.end());
      std::vector<int32_t> pos = iota(0, static_cast<int32_t>(p.size()));
      positions.insert(positions.end(), pos.begin(), pos.end());
      total += static_cast<int32_t>(p.size());
    }
    Session s(model.get(), layout, total);
    for (int32_t id : ids) s.create(id);
    std::vector<float> logits = s.forward(ids, n_tokens, tokens, positions, true, vocab);
    std::vector<int32_t> next(3);
    size_t row = 0;
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      for (size_t t = 0; t < prompts[i].size(); ++t, ++row) {
        REQUIRE(max_abs_diff(&logits[row * vocab], &alone_prefill[i][t * vocab], vocab) <=
                kTolerance);
      }
      next[i] = argmax(&logits[(row - 1) * vocab], vocab);
    }
    for (int step = 0; step < decode_steps; ++step) {
      CAPTURE(step);
      std::vector<int32_t> pos(3);
      for (size_t i = 0; i < 3; ++i) pos[i] = static_cast<int32_t>(prompts[i].size()) + step;
      std::vector<float> out = s.forward(ids, {1, 1, 1}, next, pos, false, vocab);
      for (size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        REQUIRE(max_abs_diff(&out[i * vocab], alone_steps[i][step].data(), vocab) <= kTolerance);
        next[i] = argmax(&out[i * vocab], vocab);
      }
    }
    // Sequences keep their own lengths.
    for (size_t i = 0; i < 3; ++i) {
      int32_t length = 0;
      KVL_REQUIRE_OK(kvc_seq_length(s.cache(), ids[i], 2, 1, &length));
      CHECK(length == static_cast<int32_t>(prompts[i].size()) + decode_steps);
    }
  }
}

TEST_CASE("llama reference: engine errors leave the cache unchanged") {
  ModelPtr model = load_model();
  const int vocab = kvl_model_config(model.get())->vocab_size;
  Session s(model.get(), KVC_LAYOUT_PAGED, 4);
  s.create(0);
  std::vector<float> logits(static_cast<size_t>(8) * vocab);
  char error[512] = "";
  const int32_t seq = 0, unknown = 5, one = 1, five = 5, pos0 = 0, bad_token = vocab;
  const int32_t tokens[5] = {1, 2, 3, 4, 5}, positions[5] = {0, 1, 2, 3, 4};

  CHECK(kvl_engine_forward(s.engine(), 1, &seq, &five, tokens, positions, 1, logits.data(), error,
                           sizeof error) == -1);
  CHECK(std::string(error).find("max_batch_tokens") != std::string::npos);
  CHECK(kvl_engine_forward(s.engine(), 1, &seq, &one, &bad_token, &pos0, 0, logits.data(), error,
                           sizeof error) == -1);
  CHECK(std::string(error).find("vocabulary") != std::string::npos);
  CHECK(kvl_engine_forward(s.engine(), 1, &unknown, &one, tokens, &pos0, 0, logits.data(), error,
                           sizeof error) == -1);
  CHECK(std::string(error).find("NOT_FOUND") != std::string::npos);
  int32_t length = -1;
  KVL_REQUIRE_OK(kvc_seq_length(s.cache(), 0, 0, 0, &length));
  CHECK(length == 0);

  // A cache of another shape is refused.
  kvc_context* context = nullptr;
  kvc_cache* cache = nullptr;
  KVL_REQUIRE_OK(kvc_context_create(nullptr, &context));
  kvc_cache_params p;
  kvl_cache_params_for(model.get(), &p);
  p.layers += 1;
  KVL_REQUIRE_OK(kvc_cache_create(context, &p, &cache));
  kvl_engine* engine = nullptr;
  CHECK(kvl_engine_create(model.get(), cache, 4, &engine, error, sizeof error) == -1);
  CHECK(engine == nullptr);
  CHECK(std::string(error).find("does not match") != std::string::npos);
  kvc_cache_destroy(cache);
  kvc_context_destroy(context);
}

// ================================================================== tokenizer

TEST_CASE("llama tokenizer: llama2.c encode, and decode gives the text back") {
  TokenizerPtr tok = load_tokenizer();
  const std::string text = first_lines(kTextPath, 80);
  REQUIRE(text.size() > 1000);
  for (unsigned char c : text) REQUIRE(c < 0x80);  // ASCII

  const std::vector<int32_t> tokens = encode(tok.get(), text, true);
  REQUIRE(tokens.size() > 1);
  CHECK(tokens[0] == 1);
  CHECK(decode_all(tok.get(), tokens) == text);
  std::vector<int32_t> expected = naive_encode(kTokenizerPath, text);
  expected.insert(expected.begin(), 1);
  CHECK(tokens == expected);
  MESSAGE(text.size() << " bytes -> " << tokens.size() << " tokens");

  // Byte fallback for what the vocabulary lacks, BOS/EOS, the empty text, a buffer too small.
  const std::string utf8 = "caf\xc3\xa9 \xe2\x98\x95 and \x01 bytes";
  const std::vector<int32_t> t2 = encode(tok.get(), utf8, true);
  CHECK(decode_all(tok.get(), t2) == utf8);
  std::vector<int32_t> buffer(4);
  CHECK(kvl_tokenizer_encode(tok.get(), "", 1, 1, buffer.data(), 4) == 2);
  CHECK(buffer[0] == 1);
  CHECK(buffer[1] == 2);
  CHECK(kvl_tokenizer_encode(tok.get(), "Once upon a time", 1, 0, buffer.data(), 1) == -1);
  CHECK(std::string(kvl_tokenizer_decode(tok.get(), 1, 3 + 'A')) == "A");
  CHECK(std::string(kvl_tokenizer_decode(tok.get(), 5, 3 + '\n')) == "\n");
}

TEST_SUITE_END();

// ================================================================== without the model

namespace {

std::string write_temp(const std::string& name, const std::vector<int32_t>& header,
                       size_t extra_floats) {
  const fs::path path =
      fs::temp_directory_path() / ("kvc_llama_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()),
            static_cast<std::streamsize>(header.size() * sizeof(int32_t)));
  std::vector<float> zeros(extra_floats, 0.0f);
  out.write(reinterpret_cast<const char*>(zeros.data()),
            static_cast<std::streamsize>(zeros.size() * sizeof(float)));
  return path.string();
}

}  // namespace

// Floats after the header in a version 0 file of this shape (shared classifier).
size_t checkpoint_floats(int dim, int hidden, int layers, int heads, int kv_heads, int vocab,
                         int seq_len) {
  const size_t hd = dim / heads, kv = hd * kv_heads;
  return static_cast<size_t>(vocab) * dim +
         layers * (2.0 * dim + 2.0 * dim * dim + 2.0 * kv * dim + 3.0 * hidden * dim) + dim +
         seq_len * hd;
}

void expect_load_error(const std::string& path, const std::string& expected) {
  CAPTURE(path);
  kvl_model* model = nullptr;
  char error[512] = "";
  CHECK(kvl_model_load(path.c_str(), &model, error, sizeof error) == -1);
  CHECK(model == nullptr);
  CHECK_MESSAGE(std::string(error).find(expected) != std::string::npos,
                "error '" << error << "' does not say '" << expected << "'");
  std::error_code ec;
  fs::remove(path, ec);
}

TEST_CASE("llama model: checkpoint validation gives clear errors") {
  const std::vector<int32_t> good = {8, 16, 1, 2, 1, 4, 4};
  const size_t floats = checkpoint_floats(8, 16, 1, 2, 1, 4, 4);
  {
    const std::string path = write_temp("good.bin", good, floats);
    kvl_model* model = nullptr;
    char error[512] = "";
    REQUIRE_MESSAGE(kvl_model_load(path.c_str(), &model, error, sizeof error) == 0, error);
    const kvl_config* c = kvl_model_config(model);
    CHECK(c->dim == 8);
    CHECK(c->n_kv_heads == 1);
    CHECK(c->shared_classifier == 1);
    CHECK(c->rope_theta == 10000.0f);
    kvl_model_free(model);
    fs::remove(path);
  }
  expect_load_error((fs::temp_directory_path() / "kvc_llama_test_missing.bin").string(),
                    "cannot open");
  expect_load_error(write_temp("tiny.bin", {8, 16, 1}, 0), "short file");
  expect_load_error(write_temp("truncated.bin", good, floats - 1), "short file");
  expect_load_error(write_temp("oversized.bin", good, floats + 1), "oversized");
  expect_load_error(write_temp("magic.bin", {0x616b3432, 1, 8, 16, 1, 2, 1}, 100), "version 1");
  expect_load_error(write_temp("negdim.bin", {-8, 16, 1, 2, 1, 4, 4}, floats), "dim must be > 0");
  expect_load_error(write_temp("zerolayers.bin", {8, 16, 0, 2, 1, 4, 4}, floats),
                    "n_layers must be > 0");
  expect_load_error(write_temp("gqa.bin", {12, 16, 1, 3, 2, 4, 4}, floats),
                    "n_heads (3) is not a multiple of n_kv_heads (2)");
  expect_load_error(write_temp("heads.bin", {10, 16, 1, 4, 1, 4, 4}, floats),
                    "dim (10) is not divisible by n_heads (4)");
}

TEST_CASE("llama model: random models are reproducible and sane") {
  kvl_config c{};
  c.dim = 64, c.hidden_dim = 176, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2;
  c.vocab_size = 300, c.seq_len = 128, c.shared_classifier = 0;
  char error[512] = "";
  kvl_config bad = c;
  bad.n_kv_heads = 3;
  kvl_model* m = nullptr;
  CHECK(kvl_model_random(&bad, 1, &m, error, sizeof error) == -1);
  CHECK(m == nullptr);
  CHECK(std::string(error).find("not a multiple") != std::string::npos);

  std::vector<std::vector<float>> runs;
  for (uint64_t seed : {11u, 11u, 12u}) {
    REQUIRE_MESSAGE(kvl_model_random(&c, seed, &m, error, sizeof error) == 0, error);
    ModelPtr model(m);
    CHECK(kvl_model_config(m)->rope_theta == 10000.0f);
    CHECK(kvl_model_config(m)->norm_eps == 1e-5f);
    Session s(m, KVC_LAYOUT_PAGED, 16);
    s.create(0);
    std::vector<int32_t> tokens = {1, 17, 250, 3, 99, 42, 7, 8};
    runs.push_back(s.forward({0}, {8}, tokens, iota(0, 8), true, c.vocab_size));
    for (float v : runs.back()) REQUIRE((std::isfinite(v) && std::fabs(v) < 10.0f));
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] != runs[2]);
}

TEST_CASE("llama tokenizer: file validation") {
  kvl_tokenizer* t = nullptr;
  char error[512] = "";
  CHECK(kvl_tokenizer_load("/nonexistent/tok.bin", 512, &t, error, sizeof error) == -1);
  CHECK(std::string(error).find("cannot open") != std::string::npos);
  const std::string path = write_temp("tok.bin", {16, 0, 3}, 0);  // one score, a length, no bytes
  CHECK(kvl_tokenizer_load(path.c_str(), 512, &t, error, sizeof error) == -1);
  CHECK(t == nullptr);
  CHECK(std::string(error).find("short file") != std::string::npos);
  CHECK(kvl_tokenizer_load(path.c_str(), 100, &t, error, sizeof error) == -1);
  CHECK(std::string(error).find(">= 259") != std::string::npos);
  fs::remove(path);
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  std::string missing;
  for (const std::string& path : {kModelPath, kTokenizerPath, kTextPath}) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
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
