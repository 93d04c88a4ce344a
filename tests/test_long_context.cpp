// Attention over long contexts with few KV heads: the CPU backend then splits each head's
// keys into ranges across cores and merges the partial softmax states. Checked against the
// naive reference, for decode steps and a short chunk, f32 and f16 storage.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference_attention.hpp"
#include "test_support.hpp"

namespace {

constexpr int kQHeads = 8;
constexpr int kHeadDim = 64;

double long_context_error(kvc_dtype dtype, int kv_heads, int tokens, int window) {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1;
  p.kv_heads = kv_heads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = dtype;
  p.memory_limit = size_t{256} << 20;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);

  ref::Rng rng(21);
  ref::History history(kv_heads, kHeadDim);
  const size_t kv_row = static_cast<size_t>(kv_heads) * kHeadDim;
  const size_t q_row = static_cast<size_t>(kQHeads) * kHeadDim;
  ref::Options options;
  options.window = window;
  kvc_attention_params attention;
  kvc_attention_params_init(&attention);
  attention.sliding_window = window;
  double worst = 0.0;
  int32_t position = 0;
  // A long prompt, then decode steps and one short chunk: few queries over many keys.
  for (int n : {tokens, 1, 1, 3, 1}) {
    std::vector<float> k = rng.vec(static_cast<size_t>(n) * kv_row);
    std::vector<float> v = rng.vec(k.size());
    std::vector<float> q = rng.vec(static_cast<size_t>(n) * q_row);
    for (float& x : k) x = ref::round_to_dtype(x, dtype);
    for (float& x : v) x = ref::round_to_dtype(x, dtype);
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (int32_t& pos : positions) pos = position++;
    std::vector<float> out(q.size());
    int32_t seq = 0;
    kvc_batch batch;
    kvc_batch_init(&batch, 1, &seq, &n, positions.data());
    kvc_tensor tq = kvt::tensor(q.data(), KVC_DTYPE_F32), tk = kvt::tensor(k.data(), KVC_DTYPE_F32),
               tv = kvt::tensor(v.data(), KVC_DTYPE_F32);
    kvc_tensor_mut to = kvt::tensor_mut(out.data());
    kvt::Status s(kvc_append_attend(cache.get(), 0, &batch, &tq, &tk, &tv, &attention, &to));
    REQUIRE_MESSAGE(s.ok(), s.describe());
    for (int t = 0; t < n; ++t) history.append(positions[t], &k[t * kv_row], &v[t * kv_row]);
    if (n == tokens) continue;  // the prompt itself is covered by test_attention.cpp
    std::vector<double> expected(q_row);
    for (int t = 0; t < n; ++t) {
      ref::attend(history, kQHeads, &q[t * q_row], positions[t], options, expected.data());
      for (size_t i = 0; i < q_row; ++i) {
        worst = std::max(worst, std::fabs(out[t * q_row + i] - expected[i]));
      }
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("long context: split key ranges merge to the reference") {
  for (int kv_heads : {1, 2}) {
    CAPTURE(kv_heads);
    CHECK(long_context_error(KVC_DTYPE_F32, kv_heads, 3000, 0) < 1e-5);
    CHECK(long_context_error(KVC_DTYPE_F16, kv_heads, 3000, 0) < 2e-3);
    CHECK(long_context_error(KVC_DTYPE_F32, kv_heads, 2500, 1700) < 1e-5);
  }
}
