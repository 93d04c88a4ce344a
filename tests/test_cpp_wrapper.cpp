// The header-only C++ RAII wrapper (kvcache.hpp): errors become kvcache::Error with the C code,
// handles own and release their C objects, and the data path gives the reference's results.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvcache/kvcache.hpp"
#include "reference_attention.hpp"

namespace {

template <typename F>
kvc_status_code code_of(F&& f) {
  try {
    f();
  } catch (const kvcache::Error& e) {
    CHECK(std::string(e.what()).size() > 0);
    return e.code();
  }
  return KVC_OK;
}

}  // namespace

static_assert(!std::is_copy_constructible<kvcache::Context>::value, "Context must not be copyable");
static_assert(!std::is_copy_constructible<kvcache::Cache>::value, "Cache must not be copyable");
static_assert(std::is_move_constructible<kvcache::Cache>::value, "Cache must be movable");
static_assert(std::is_base_of<std::exception, kvcache::Error>::value, "kvcache::Error is an exception");

TEST_CASE("cpp wrapper: context, plugins and errors") {
  kvcache::Context ctx;
  REQUIRE(ctx.get() != nullptr);
  bool has_cpu = false;
  for (const kvc_plugin_info& info : ctx.plugins())
    has_cpu = has_cpu || (info.kind == KVC_PLUGIN_BACKEND && std::string(info.name) == "cpu");
  CHECK(has_cpu);

  CHECK(code_of([] { kvcache::Context bad("cache:\n  nope: 1\n"); }) == KVC_ERR_CONFIG);
  CHECK(code_of([&] { ctx.load_plugin(KVC_TEST_BAD_ABI_PLUGIN); }) == KVC_ERR_PLUGIN);
  CHECK(code_of([] { kvcache::Context::from_file("/nonexistent/kvc.yaml"); }) == KVC_ERR_NOT_FOUND);

  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.q_heads = 3;
  p.kv_heads = 2;
  CHECK(code_of([&] { kvcache::Cache c(ctx, p); }) == KVC_ERR_INVALID_ARGUMENT);

  p.q_heads = 2;
  kvcache::Cache plain(ctx, p);
  CHECK(code_of([&] { plain.policy_info(); }) == KVC_ERR_NOT_FOUND);
  p.policy = "streaming";
  p.budget = 32;
  kvcache::Cache streaming(ctx, p);
  const kvc_policy_info info = streaming.policy_info();
  CHECK(std::string(info.name) == "streaming");
  CHECK(info.sinks == 4);
  CHECK(info.budget_tokens == 32);
}

TEST_CASE("cpp wrapper: a cache round trip against the reference") {
  kvcache::Context ctx("cache:\n  layers: 2\n  kv_heads: 2\n  q_heads: 4\n  head_dim: 16\n  dtype: f32\n");
  kvcache::Cache from_ctx(ctx, std::string());
  CHECK(from_ctx.stats().bytes_used == 0);

  kvcache::Cache cache(ctx, "cache:\n  layers: 2\n  kv_heads: 2\n  q_heads: 4\n  head_dim: 16\n  dtype: f32\n  layout: contiguous\n");
  cache.create_sequence(4);
  CHECK(code_of([&] { cache.create_sequence(4); }) == KVC_ERR_ALREADY_EXISTS);
  CHECK(code_of([&] { (void)cache.length(5, 0, 0); }) == KVC_ERR_NOT_FOUND);

  const int32_t seq = 4, n = 6;
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = i;
  kvc_batch b;
  kvc_batch_init(&b, 1, &seq, &n, pos.data());
  ref::Rng rng(77);
  std::vector<float> k = rng.vec(n * 32), v = rng.vec(n * 32), q = rng.vec(n * 64), out(n * 64);
  const kvc_tensor kt{k.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  const kvc_tensor vt{v.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  const kvc_tensor qt{q.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  kvc_tensor_mut ot{out.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  // Default attention parameters (the wrapper passes NULL).
  cache.append_attend(1, b, qt, kt, vt, ot);
  ref::History h(2, 16);
  for (int i = 0; i < n; ++i) h.append(i, &k[i * 32], &v[i * 32]);
  std::vector<double> expect(64);
  double err = 0;
  for (int i = 0; i < n; ++i) {
    ref::attend(h, 4, &q[i * 64], i, ref::Options{}, expect.data());
    for (int e = 0; e < 64; ++e) err = std::max(err, std::fabs(out[i * 64 + e] - expect[e]));
  }
  CHECK(err <= 1e-5);
  CHECK(cache.length(4, 1, 1) == n);
  CHECK(cache.length(4, 0, 1) == 0);
  CHECK(cache.stats().tokens_stored == static_cast<uint64_t>(n * 2));

  // Separate append and attend give the same outputs on layer 0.
  std::vector<float> out2(n * 64);
  kvc_tensor_mut ot2{out2.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  cache.append(0, b, kt, vt);
  kvc_attention_params ap;
  kvc_attention_params_init(&ap);
  cache.attend(0, b, qt, ot2, &ap);
  for (int e = 0; e < n * 64; ++e) CHECK(std::fabs(out2[e] - out[e]) <= 1e-6);

  // Moving transfers ownership.
  kvcache::Cache moved(std::move(cache));
  CHECK(moved.get() != nullptr);
  CHECK(moved.length(4, 0, 0) == n);
  moved.reserve(4, 64);
  moved.remove_sequence(4);
  CHECK(moved.stats().sequences == 0);
  CHECK(code_of([&] { moved.remove_sequence(4); }) == KVC_ERR_NOT_FOUND);
}
