// The header-only C++ RAII wrapper (kvcache.hpp): errors become kvcache::Error with the C code,
// handles own and release their C objects, the data path gives the reference's results, and
// the sequence operations (fork, truncate, remove_range, export/import) and the prefix cache
// (publish, lookup, attach) behave as in C.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
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

// The fields of two kvc_cache_params, strings by pointer (padding is not compared).
bool same_params(const kvc_cache_params& a, const kvc_cache_params& b) {
  return a.struct_size == b.struct_size && a.layers == b.layers && a.kv_heads == b.kv_heads &&
         a.q_heads == b.q_heads && a.head_dim == b.head_dim && a.dtype == b.dtype &&
         a.layout == b.layout && a.block_tokens == b.block_tokens &&
         a.growth_factor == b.growth_factor && a.memory_limit == b.memory_limit &&
         a.backend == b.backend && a.budget == b.budget && a.budget_ratio == b.budget_ratio &&
         a.sinks == b.sinks && a.recent == b.recent && a.n_policy_params == b.n_policy_params &&
         a.prefill == b.prefill && a.decode_every == b.decode_every &&
         a.decode_slack == b.decode_slack && a.k_dtype == b.k_dtype && a.v_dtype == b.v_dtype &&
         a.k_rotation == b.k_rotation && a.prefix_cache == b.prefix_cache &&
         a.prefix_store == b.prefix_store && a.prefix_write_through == b.prefix_write_through &&
         a.demote_keep == b.demote_keep && a.demote_k_dtype == b.demote_k_dtype &&
         a.demote_v_dtype == b.demote_v_dtype;
}

}  // namespace

static_assert(!std::is_copy_constructible<kvcache::Context>::value, "Context must not be copyable");
static_assert(!std::is_copy_constructible<kvcache::Cache>::value, "Cache must not be copyable");
static_assert(std::is_move_constructible<kvcache::Cache>::value, "Cache must be movable");
static_assert(std::is_base_of<std::exception, kvcache::Error>::value, "kvcache::Error is an exception");

TEST_CASE("cpp wrapper: a cache's rotation of K is read back; a bad one throws") {
  kvcache::Context ctx;
  kvc_cache_params params = kvcache::cache_params();
  params.k_dtype = KVC_DTYPE_Q4_0;
  params.k_rotation = KVC_ROTATION_HADAMARD;
  params.backend = "cpu";
  kvcache::Cache cache(ctx, params);
  CHECK(cache.params().k_rotation == KVC_ROTATION_HADAMARD);
  params.k_rotation = 3;
  CHECK(code_of([&] { kvcache::Cache bad(ctx, params); }) == KVC_ERR_INVALID_ARGUMENT);
}

TEST_CASE("cpp wrapper: demotion is off by default and read back; without a policy it throws") {
  kvcache::Context ctx;
  kvc_cache_params params = kvcache::cache_params();
  CHECK(params.demote_k_dtype == -1);
  CHECK(params.demote_v_dtype == -1);
  CHECK(params.demote_keep == 0.25);
  params.backend = "cpu";
  kvcache::Cache cache(ctx, params);
  const kvc_cache_params read = cache.params();
  CHECK(read.demote_k_dtype == -1);
  CHECK(read.demote_v_dtype == -1);
  CHECK(read.demote_keep == 0.25);
  CHECK(cache.stats().tokens_demoted == 0);
  params.demote_k_dtype = KVC_DTYPE_Q4_0;
  CHECK(code_of([&] { kvcache::Cache bad(ctx, params); }) == KVC_ERR_INVALID_ARGUMENT);
}

TEST_CASE("cpp wrapper: the format table's descriptions") {
  const kvc_format_info f16 = kvcache::describe_format(KVC_DTYPE_F16);
  CHECK(f16.format == KVC_DTYPE_F16);
  CHECK(std::string(f16.name) == "f16");
  CHECK(f16.group_size == 1);
  CHECK(f16.group_bytes == 2);
  CHECK(kvcache::describe_format(KVC_DTYPE_F32).group_bytes == 4);
  const auto unknown = static_cast<kvc_dtype>(KVC_FORMAT_CODE_END);  // not a format
  CHECK(code_of([&] { kvcache::describe_format(unknown); }) == KVC_ERR_INVALID_ARGUMENT);
}

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

namespace {

constexpr int32_t kSeqLayers = 2, kSeqKvHeads = 2, kSeqQHeads = 4, kSeqHeadDim = 8;

kvcache::Cache sequence_cache(kvcache::Context& ctx) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kSeqLayers;
  p.kv_heads = kSeqKvHeads;
  p.q_heads = kSeqQHeads;
  p.head_dim = kSeqHeadDim;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 4;
  return kvcache::Cache(ctx, p);
}

// append_attend of random tokens at `positions` on every layer; all layers' outputs.
std::vector<float> feed(kvcache::Cache& cache, int32_t seq, const std::vector<int32_t>& positions,
                        uint32_t seed) {
  const int32_t n = static_cast<int32_t>(positions.size());
  kvc_batch b;
  kvc_batch_init(&b, 1, &seq, &n, positions.data());
  ref::Rng rng(seed);
  std::vector<float> all;
  for (int32_t layer = 0; layer < kSeqLayers; ++layer) {
    std::vector<float> k = rng.vec(n * kSeqKvHeads * kSeqHeadDim), v = rng.vec(k.size());
    std::vector<float> q = rng.vec(n * kSeqQHeads * kSeqHeadDim), out(q.size());
    const kvc_tensor kt{k.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    const kvc_tensor vt{v.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    const kvc_tensor qt{q.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    kvc_tensor_mut ot{out.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    cache.append_attend(layer, b, qt, kt, vt, ot);
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

std::vector<int32_t> positions(int32_t first, int32_t end) {
  std::vector<int32_t> p;
  for (int32_t i = first; i < end; ++i) p.push_back(i);
  return p;
}

// Positions, then K and V values, of every (layer, KV head), read through Cache::view().
std::vector<float> stored(const kvcache::Cache& cache, int32_t seq) {
  std::vector<float> all;
  for (int32_t layer = 0; layer < kSeqLayers; ++layer) {
    for (int32_t h = 0; h < kSeqKvHeads; ++h) {
      for (const kvc_segment_view& s : cache.view(seq, layer, h)) {
        const auto* k = static_cast<const float*>(s.k);
        const auto* v = static_cast<const float*>(s.v);
        for (int32_t i = 0; i < s.count; ++i) all.push_back(static_cast<float>(s.pos[i]));
        all.insert(all.end(), k, k + s.count * kSeqHeadDim);
        all.insert(all.end(), v, v + s.count * kSeqHeadDim);
      }
    }
  }
  return all;
}

std::vector<int32_t> stored_positions(const kvcache::Cache& cache, int32_t seq, int32_t layer,
                                      int32_t kv_head) {
  std::vector<int32_t> pos;
  for (const kvc_segment_view& s : cache.view(seq, layer, kv_head))
    pos.insert(pos.end(), s.pos, s.pos + s.count);
  return pos;
}

}  // namespace

TEST_CASE("cpp wrapper: fork, truncate, remove_range") {
  kvcache::Context ctx;
  kvcache::Cache cache = sequence_cache(ctx);
  cache.create_sequence(0);
  cache.create_sequence(2);
  feed(cache, 0, positions(0, 10), 1);
  feed(cache, 2, positions(0, 10), 1);  // the same prompt, independently

  cache.fork(0, 1);
  CHECK(cache.stats().bytes_shared > 0);
  CHECK(stored(cache, 1) == stored(cache, 0));
  // Divergent tokens: branch 1 gets what independent sequence 2 gets, bit for bit.
  const std::vector<float> out0 = feed(cache, 0, {10}, 2);
  const std::vector<float> out1 = feed(cache, 1, {10}, 3);
  CHECK(feed(cache, 2, {10}, 3) == out1);
  CHECK(out0 != out1);
  CHECK(stored(cache, 1) == stored(cache, 2));
  CHECK(code_of([&] { cache.fork(0, 1); }) == KVC_ERR_ALREADY_EXISTS);
  CHECK(code_of([&] { cache.fork(9, 3); }) == KVC_ERR_NOT_FOUND);

  cache.truncate(1, 6);
  CHECK(stored_positions(cache, 1, 1, 1) == positions(0, 6));
  CHECK(stored_positions(cache, 0, 1, 1) == positions(0, 11));
  cache.remove_range(1, 2, 4);
  CHECK(stored_positions(cache, 1, 0, 0) == std::vector<int32_t>{0, 1, 4, 5});
  CHECK(cache.length(1, 0, 1) == 4);
}

TEST_CASE("cpp wrapper: a cache's stream reaches the backend, which the cpu one ignores") {
  kvcache::Context ctx;
  kvcache::Cache with_stream = sequence_cache(ctx);
  kvcache::Cache without = sequence_cache(ctx);
  int stream = 0;  // stands for an engine's stream
  with_stream.set_stream(&stream);
  for (kvcache::Cache* cache : {&with_stream, &without}) {
    cache->create_sequence(0);
    feed(*cache, 0, positions(0, 12), 6);
    cache->fork(0, 1);
    cache->truncate(1, 7);
  }
  CHECK(feed(with_stream, 1, {7}, 2) == feed(without, 1, {7}, 2));
  CHECK(stored(with_stream, 0) == stored(without, 0));
  with_stream.set_stream(nullptr);
  CHECK(feed(with_stream, 0, {12}, 3) == feed(without, 0, {12}, 3));
}

TEST_CASE("cpp wrapper: export and import, through bytes and a file") {
  kvcache::Context ctx;
  kvcache::Cache cache = sequence_cache(ctx);
  kvcache::Cache other = sequence_cache(ctx);
  cache.create_sequence(0);
  feed(cache, 0, positions(0, 9), 4);

  const std::vector<uint8_t> bytes = cache.export_sequence(0);
  CHECK(!bytes.empty());
  cache.import_sequence(5, bytes);
  other.import_sequence(0, bytes.data(), bytes.size());
  CHECK(stored(cache, 5) == stored(cache, 0));
  CHECK(stored(other, 0) == stored(cache, 0));
  CHECK(stored_positions(other, 0, 1, 0) == positions(0, 9));
  // The same next token gives the same outputs in the original and both imports.
  const std::vector<float> expected = feed(cache, 0, {9}, 5);
  CHECK(feed(cache, 5, {9}, 5) == expected);
  CHECK(feed(other, 0, {9}, 5) == expected);

  const std::string path =
      (std::filesystem::temp_directory_path() / "kvc_test_cpp_wrapper.kvcseq").string();
  cache.export_file(0, path);
  other.import_file(1, path);
  std::filesystem::remove(path);
  CHECK(stored(other, 1) == stored(cache, 0));

  // Errors carry the C status code; a failed import creates no sequence.
  std::vector<uint8_t> corrupt = bytes;
  corrupt[corrupt.size() / 2] ^= 0x40;
  CHECK(code_of([&] { cache.import_sequence(6, corrupt); }) == KVC_ERR_INVALID_ARGUMENT);
  CHECK(code_of([&] { (void)cache.length(6, 0, 0); }) == KVC_ERR_NOT_FOUND);
  CHECK(code_of([&] { cache.import_sequence(5, bytes); }) == KVC_ERR_ALREADY_EXISTS);
  CHECK(code_of([&] { (void)cache.export_sequence(7); }) == KVC_ERR_NOT_FOUND);
  CHECK(code_of([&] { cache.export_file(0, "/nonexistent/dir/kvc.kvcseq"); }) == KVC_ERR_IO);
  CHECK(code_of([&] { cache.import_file(6, "/nonexistent/kvc.kvcseq"); }) == KVC_ERR_NOT_FOUND);
  CHECK(cache.stats().sequences == 2);
}

TEST_CASE("cpp wrapper: every other call, against the C call's result") {
  CHECK(kvcache::version() == kvc_version());
  CHECK(kvcache::version_string() == kvc_version_string());
  CHECK(kvcache::status_code_name(KVC_ERR_IO) == "IO");
  CHECK(kvcache::dtype_size(KVC_DTYPE_BF16) == 2);
  CHECK(kvcache::dtype_name(KVC_DTYPE_F16) == "f16");

  kvc_cache_params c_params;
  kvc_cache_params_init(&c_params);
  kvc_cache_params params = kvcache::cache_params();
  CHECK(same_params(params, c_params));
  kvc_attention_params c_attention;
  kvc_attention_params_init(&c_attention);
  const kvc_attention_params attention = kvcache::attention_params();
  CHECK(attention.struct_size == c_attention.struct_size);
  CHECK(attention.scale == c_attention.scale);
  CHECK(attention.sliding_window == c_attention.sliding_window);
  CHECK(attention.softcap == c_attention.softcap);

  kvcache::Context ctx("stores:\n  local: { plugin: host }\n");
  CHECK(ctx.plugin_count() == kvc_context_plugin_count(ctx.get()));
  REQUIRE(ctx.plugin_count() >= 1);
  kvc_plugin_info c_info{};
  c_info.struct_size = sizeof c_info;
  REQUIRE(kvc_context_plugin_info(ctx.get(), 0, &c_info) == nullptr);
  CHECK(std::string(ctx.plugin(0).name) == c_info.name);
  CHECK(code_of([&] { ctx.plugin(ctx.plugin_count()); }) == KVC_ERR_INVALID_ARGUMENT);

  constexpr int32_t kQ = 2, kD = 4, kTokens = 6;
  params.kv_heads = 1;
  params.q_heads = kQ;
  params.head_dim = kD;
  params.dtype = KVC_DTYPE_F32;
  params.block_tokens = 2;
  params.policy = "window";
  params.budget = 4;
  params.recent = 2;
  kvcache::Cache cache(ctx, params);
  kvc_cache_params c_read;
  kvc_cache_params_init(&c_read);
  REQUIRE(kvc_cache_get_params(cache.get(), &c_read) == nullptr);
  const kvc_cache_params read = cache.params();
  CHECK(read.q_heads == kQ);
  CHECK(read.budget == 4);
  CHECK(same_params(read, c_read));
  CHECK(std::string(read.policy) == c_read.policy);

  std::vector<float> k(kTokens * kD), v(kTokens * kD);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = std::sin(0.3f * static_cast<float>(i));
    v[i] = std::cos(0.2f * static_cast<float>(i));
  }
  std::vector<int32_t> positions(kTokens);
  for (int32_t i = 0; i < kTokens; ++i) positions[i] = i;
  const kvc_tensor kt{k.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  const kvc_tensor vt{v.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  const int32_t n = kTokens;
  for (int32_t seq : {0, 1}) {
    cache.create_sequence(seq);
    cache.append(0, kvcache::batch(1, &seq, &n, positions.data()), kt, vt);
  }

  size_t c_bytes = 0;
  REQUIRE(kvc_cache_estimate_peak_bytes(cache.get(), 100, 10, 20, &c_bytes) == nullptr);
  CHECK(cache.estimate_peak_bytes(100, 10, 20) == c_bytes);
  kvc_estimate_request request = kvcache::estimate_request(100, 10, 20);
  CHECK(request.struct_size == sizeof request);
  CHECK(cache.estimate(request) == c_bytes);
  request.marks_prompt_end = 1;
  REQUIRE(kvc_cache_estimate(cache.get(), &request, &c_bytes) == nullptr);
  CHECK(cache.estimate(request) == c_bytes);

  // The window policy reads no statistics: the C call and the wrapper refuse them alike.
  const std::vector<float> scores(kTokens, 1.0f);
  kvc_status* c_refusal =
      kvc_report_stats(cache.get(), 0, 0, 0, KVC_STAT_KIND_ATTN_SUM, scores.data(), kTokens);
  REQUIRE(c_refusal != nullptr);
  CHECK(code_of([&] { cache.report_stats(0, 0, 0, KVC_STAT_KIND_ATTN_SUM, scores); }) ==
        kvc_status_get_code(c_refusal));
  kvc_status_free(c_refusal);

  // Prefix sharing and offload, before compression removes the prompt's first tokens.
  const std::vector<int32_t> tokens = {9, 8, 7, 6, 5};
  kvc_prefix prefix = kvcache::prefix("cpp-model", tokens);
  CHECK(prefix.chunk_tokens == 256);
  prefix.chunk_tokens = 2;
  CHECK(cache.prefix_save(1, "local", prefix) == 4);
  CHECK(cache.prefix_load(2, "local", prefix) == 4);
  CHECK(cache.length(2, 0, 0) == 4);
  cache.offload(2, "local", "seq2");
  CHECK(code_of([&] { cache.length(2, 0, 0); }) == KVC_ERR_NOT_FOUND);
  cache.restore(2, "local", "seq2");
  CHECK(cache.length(2, 0, 0) == 4);
  ctx.store_drop("local", "seq2");
  CHECK(code_of([&] { ctx.store_drop("local", "seq2"); }) == KVC_ERR_NOT_FOUND);

  // Compressing sequence 0 with the wrapper and sequence 1 with C leaves the same tokens.
  cache.compress(0, {0});
  const int32_t one_seq = 1;
  REQUIRE(kvc_compress(cache.get(), 0, 1, &one_seq) == nullptr);
  CHECK(cache.length(0, 0, 0) == 4);
  CHECK(cache.length(1, 0, 0) == 4);
  const std::vector<kvc_segment_view> a = cache.view(0, 0, 0), b = cache.view(1, 0, 0);
  std::vector<int32_t> pos_a, pos_b;
  for (const kvc_segment_view& s : a) pos_a.insert(pos_a.end(), s.pos, s.pos + s.count);
  for (const kvc_segment_view& s : b) pos_b.insert(pos_b.end(), s.pos, s.pos + s.count);
  CHECK(pos_a == pos_b);
  CHECK(pos_a.back() == kTokens - 1);
}

namespace {

constexpr int32_t kPrefixLayers = 2, kPrefixHeadDim = 16, kPrefixTokens = 10;

// A paged f32 cache of one KV head, with prefix caching unless @p enabled is 0.
kvcache::Cache prefix_cache(kvcache::Context& ctx, int32_t enabled = 1) {
  kvc_cache_params p = kvcache::cache_params();
  p.layers = kPrefixLayers;
  p.kv_heads = 1;
  p.head_dim = kPrefixHeadDim;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 4;
  p.prefix_cache = enabled;
  return kvcache::Cache(ctx, p);
}

// The K rows of tokens 0..kPrefixTokens-1 on @p layer, each value naming its layer, token and
// dimension; V is their negation.
std::vector<float> prefix_keys(int32_t layer) {
  std::vector<float> k(kPrefixTokens * kPrefixHeadDim);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(1000 * layer) + static_cast<float>(i);
  return k;
}

std::vector<float> negated(std::vector<float> values) {
  for (float& x : values) x = -x;
  return values;
}

// Creates @p seq holding tokens 0..kPrefixTokens-1 (prefix_keys) on every layer.
void fill_prefix(kvcache::Cache& cache, int32_t seq) {
  cache.create_sequence(seq);
  const std::vector<int32_t> pos = positions(0, kPrefixTokens);
  const int32_t n = kPrefixTokens;
  for (int32_t layer = 0; layer < kPrefixLayers; ++layer) {
    const std::vector<float> k = prefix_keys(layer), v = negated(k);
    const kvc_tensor kt{k.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    const kvc_tensor vt{v.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
    cache.append(layer, kvcache::batch(1, &seq, &n, pos.data()), kt, vt);
  }
}

// The K then the V values @p seq stores on @p layer, in storage order.
std::vector<float> stored_rows(const kvcache::Cache& cache, int32_t seq, int32_t layer) {
  std::vector<float> k, v;
  for (const kvc_segment_view& s : cache.view(seq, layer, 0)) {
    const auto* sk = static_cast<const float*>(s.k);
    const auto* sv = static_cast<const float*>(s.v);
    k.insert(k.end(), sk, sk + s.count * kPrefixHeadDim);
    v.insert(v.end(), sv, sv + s.count * kPrefixHeadDim);
  }
  k.insert(k.end(), v.begin(), v.end());
  return k;
}

}  // namespace

TEST_CASE("cpp wrapper: the prefix cache publishes, looks up and attaches whole blocks") {
  kvcache::Context ctx;
  kvcache::Cache cache = prefix_cache(ctx);
  CHECK(cache.params().prefix_cache == 1);
  fill_prefix(cache, 0);
  const std::vector<int32_t> ids = {21, 22, 23, 24, 25, 26, 27, 28, 29, 30};
  const kvc_prefix prefix = kvcache::prefix("cpp-model", ids);

  // 10 tokens fill two blocks of 4: 8 tokens are published and found.
  CHECK(cache.prefix_publish(0, prefix) == 8);
  CHECK(cache.prefix_lookup(prefix) == 8);
  std::vector<int32_t> diverging = ids;
  diverging[5] = 99;
  CHECK(cache.prefix_lookup(kvcache::prefix("cpp-model", diverging)) == 4);

  CHECK(cache.prefix_attach(1, prefix) == 8);
  CHECK(cache.stats().bytes_shared > 0);
  for (int32_t layer = 0; layer < kPrefixLayers; ++layer) {
    CHECK(cache.length(1, layer, 0) == 8);
    CHECK(stored_positions(cache, 1, layer, 0) == positions(0, 8));
    const std::vector<float> k = prefix_keys(layer);
    std::vector<float> expected(k.begin(), k.begin() + 8 * kPrefixHeadDim);
    const std::vector<float> v = negated(expected);
    expected.insert(expected.end(), v.begin(), v.end());
    CHECK(stored_rows(cache, 1, layer) == expected);
  }

  // The published blocks outlive the sequences that held them.
  cache.remove_sequence(0);
  cache.remove_sequence(1);
  const kvc_cache_stats stats = cache.stats();
  CHECK(stats.bytes_cached > 0);
  CHECK(stats.bytes_cached == stats.bytes_used);
  CHECK(stats.prefix_hits == 1);
  CHECK(stats.prefix_tokens_reused == 8);
  CHECK(cache.prefix_lookup(prefix) == 8);
}

TEST_CASE("cpp wrapper: prefix cache misuse throws the C status code") {
  kvcache::Context ctx;
  kvcache::Cache plain = prefix_cache(ctx, 0);
  fill_prefix(plain, 0);
  const std::vector<int32_t> ids = positions(100, 100 + kPrefixTokens);
  const kvc_prefix prefix = kvcache::prefix("cpp-model", ids);
  CHECK(code_of([&] { plain.prefix_attach(1, prefix); }) == KVC_ERR_UNSUPPORTED);
  CHECK(code_of([&] { plain.prefix_publish(0, prefix); }) == KVC_ERR_UNSUPPORTED);
  CHECK(code_of([&] { (void)plain.length(1, 0, 0); }) == KVC_ERR_NOT_FOUND);

  kvcache::Cache cache = prefix_cache(ctx);
  fill_prefix(cache, 0);
  CHECK(cache.prefix_publish(0, prefix) == 8);
  CHECK(code_of([&] { cache.prefix_attach(0, prefix); }) == KVC_ERR_ALREADY_EXISTS);
  CHECK(cache.length(0, 1, 0) == kPrefixTokens);
  CHECK(cache.stats().prefix_hits == 0);
}
