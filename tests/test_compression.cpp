// Compression through the C API: statistics against a naive attention, attention over the
// kept tokens, the Batch-Max peak bound, triggers, errors that leave the cache unchanged.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>

#include "compression_reference.hpp"
#include "host_reads.hpp"
#include "stats_probe.hpp"
#include "test_support.hpp"

namespace {

using kvt::Status;

constexpr int kLayers = 2;
constexpr int kKvHeads = 2;
constexpr int kQHeads = 4;
constexpr int kHeadDim = 16;

struct Inputs {
  std::vector<float> q, k, v;
  std::vector<int32_t> pos;
};

Inputs random_inputs(std::mt19937& rng, int n, int32_t first_pos) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Inputs in;
  in.q.resize(static_cast<size_t>(n) * kQHeads * kHeadDim);
  in.k.resize(static_cast<size_t>(n) * kKvHeads * kHeadDim);
  in.v.resize(in.k.size());
  for (float& x : in.q) x = u(rng);
  for (float& x : in.k) x = u(rng);
  for (float& x : in.v) x = u(rng);
  in.pos.resize(static_cast<size_t>(n));
  std::iota(in.pos.begin(), in.pos.end(), first_pos);
  return in;
}

// Runs append_attend of one sequence's chunk on every layer, in the cache and in the model;
// returns the largest difference of the outputs.
double step(kvc_cache* cache, cref::SequenceModel& model, int32_t seq, const Inputs& in) {
  int32_t n = static_cast<int32_t>(in.pos.size());
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, in.pos.data());
  double worst = 0.0;
  for (int layer = 0; layer < kLayers; ++layer) {
    std::vector<float> out(in.q.size());
    kvc_tensor q = kvt::tensor(in.q.data(), KVC_DTYPE_F32);
    kvc_tensor k = kvt::tensor(in.k.data(), KVC_DTYPE_F32);
    kvc_tensor v = kvt::tensor(in.v.data(), KVC_DTYPE_F32);
    kvc_tensor_mut o = kvt::tensor_mut(out.data());
    Status s(kvc_append_attend(cache, layer, &batch, &q, &k, &v, nullptr, &o));
    REQUIRE_MESSAGE(s.ok(), s.describe());
    std::vector<double> expected;
    model.append_attend(layer, n, in.pos.data(), in.q.data(), in.k.data(), in.v.data(), expected);
    for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - expected[i]));
  }
  return worst;
}

// Makes the model forget what the cache evicted.
void sync_model(kvc_cache* cache, cref::SequenceModel& model, int32_t seq) {
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      std::vector<int32_t> kept = kvt::stored_positions(cache, seq, layer, h);
      model.keep(layer, h, std::set<int32_t>(kept.begin(), kept.end()));
    }
  }
}

kvc_cache_params f32_params() {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 8;
  p.memory_limit = size_t{64} << 20;
  return p;
}


}  // namespace

namespace {

// The probe policy's copy of every statistic of every head, taken by kvc_compress, against the
// model's.
void check_stats(kvc_cache* cache, int32_t seq, cref::SequenceModel& model) {
  Status s(kvc_compress(cache, -1, 1, &seq));
  REQUIRE_MESSAGE(s.ok(), s.describe());
  kvt::ProbeRead read = kvt::probe_reader();
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      const cref::HeadHistory& expected = model.head(layer, h);
      const std::vector<double>* stats[] = {&expected.attn_sum, &expected.attn_last,
                                            &expected.attn_window};
      for (int which = 0; which < 3; ++which) {
        const int32_t* pos = nullptr;
        const float* values = nullptr;
        int32_t n = read(layer, h, which, &pos, &values);
        REQUIRE(n == static_cast<int32_t>(expected.tokens()));
        size_t wrong = 0;
        for (int32_t j = 0; j < n; ++j) {
          const size_t i = static_cast<size_t>(j);
          wrong += pos[j] != expected.pos[i] ||
                   !(values[j] == doctest::Approx((*stats[which])[i]).epsilon(1e-4));
        }
        CHECK_MESSAGE(wrong == 0, "layer " << layer << " head " << h << " statistic " << which);
      }
    }
  }
}

kvt::CachePtr stats_probe_cache(kvc_context* ctx, kvc_layout layout) {
  kvc_cache_params p = f32_params();
  p.layout = layout;
  p.policy = "stats_probe";
  p.budget = 1;
  kvc_key_value params[] = {{"stats", "7"}, {"window", "4"}};
  p.policy_params = params;
  p.n_policy_params = 2;
  return kvt::make_cache(ctx, p);
}

}  // namespace

TEST_CASE("compression: attention statistics match a naive attention") {
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    CAPTURE(layout);
    kvt::ContextPtr ctx = kvt::make_context(kvt::probe_yaml().c_str());
    kvt::CachePtr cache = stats_probe_cache(ctx.get(), layout);
    REQUIRE(kvc_seq_create(cache.get(), 3) == nullptr);
    cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 4);
    std::mt19937 rng(11);
    int32_t next = 0;
    for (int n : {10, 7, 1, 1, 5, 1, 3}) {
      CHECK(step(cache.get(), model, 3, random_inputs(rng, n, next)) < 1e-5);
      next += n;
    }
    check_stats(cache.get(), 3, model);
  }
}

// The CPU backend keeps a block's logits for the statistics pass up to 4 MiB a thread and
// scores again past it: a decode token over 4200 tokens in 8-token blocks is within it, a
// 32-query chunk (64 rows with this group of 2) past it.
TEST_CASE("compression: attention statistics over a long context match a naive attention") {
  constexpr int kContext = 4200;
  kvt::ContextPtr ctx = kvt::make_context(kvt::probe_yaml().c_str());
  kvt::CachePtr cache = stats_probe_cache(ctx.get(), KVC_LAYOUT_PAGED);
  int32_t seq = 5;
  REQUIRE(kvc_seq_create(cache.get(), seq) == nullptr);
  cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 4);
  std::mt19937 rng(13);
  const Inputs context = random_inputs(rng, kContext, 0);
  int32_t n = kContext;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, context.pos.data());
  for (int layer = 0; layer < kLayers; ++layer) {
    const kvc_tensor k = kvt::tensor(context.k.data(), KVC_DTYPE_F32);
    const kvc_tensor v = kvt::tensor(context.v.data(), KVC_DTYPE_F32);
    Status s(kvc_append(cache.get(), layer, &batch, &k, &v));
    REQUIRE_MESSAGE(s.ok(), s.describe());
    model.append(layer, n, context.pos.data(), context.k.data(), context.v.data());
  }
  // attn_sum gathers both steps; attn_last and attn_window are the chunk's.
  CHECK(step(cache.get(), model, seq, random_inputs(rng, 1, kContext)) < 1e-5);
  CHECK(step(cache.get(), model, seq, random_inputs(rng, 32, kContext + 1)) < 1e-5);
  check_stats(cache.get(), seq, model);
}

TEST_CASE("compression: attention after compression equals the reference over the kept tokens") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (std::string policy : {"h2o", "tova", "snapkv", "knorm", "keydiff", "random", "streaming"}) {
    CAPTURE(policy);
    kvc_cache_params p = f32_params();
    p.policy = policy.c_str();
    p.budget = 24;
    p.recent = 4;  // snapkv would otherwise protect its whole 32-token window
    p.prefill = KVC_PREFILL_PER_CHUNK;
    p.decode_every = 4;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
    cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 32);
    std::mt19937 rng(5);
    int32_t next = 0;
    for (int n : {16, 16, 16, 16, 1, 1, 1, 1, 1, 1, 1, 1, 1, 9}) {
      // Compression happened inside the previous call: follow it before comparing.
      sync_model(cache.get(), model, 0);
      CHECK(step(cache.get(), model, 0, random_inputs(rng, n, next)) < 1e-5);
      next += n;
      for (int layer = 0; layer < kLayers; ++layer) {
        for (int h = 0; h < kKvHeads; ++h) {
          CHECK(kvt::seq_length(cache.get(), 0, layer, h) <= 24 + 4);
        }
      }
    }
    kvc_cache_stats stats = kvt::get_stats(cache.get());
    CHECK(stats.tokens_evicted > 0);
    CHECK(stats.tokens_stored + stats.tokens_evicted ==
          static_cast<uint64_t>(next) * kLayers * kKvHeads);
  }
}

// Its time is bounded by construction (runs that fire nothing are taken in one step, repeating
// states by whole periods, and at most 2^16 stores one by one); the suite's timeout catches a
// regression that loops, without a wall-clock check that a loaded machine could fail.
TEST_CASE("compression: the peak estimate of INT32_MAX tokens returns and equals the steady state") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    for (int32_t every : {1, 7}) {
      CAPTURE(layout);
      CAPTURE(every);
      kvc_cache_params p = f32_params();
      p.layout = layout;
      p.policy = "h2o";
      p.budget = 64;
      p.prefill = KVC_PREFILL_PER_CHUNK;
      p.decode_every = every;
      kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
      size_t steady = 0;
      KVT_REQUIRE_OK(kvc_cache_estimate_peak_bytes(cache.get(), 4096, 512, 4096, &steady));
      const int32_t requests[][3] = {{0, 1, INT32_MAX}, {INT32_MAX - 7, 512, 7}, {INT32_MAX, 512, 0}};
      for (const auto& r : requests) {
        CAPTURE(r[0]);
        CAPTURE(r[2]);
        size_t estimate = 0;
        KVT_CHECK_OK(kvc_cache_estimate_peak_bytes(cache.get(), r[0], r[1], r[2], &estimate));
        if (r[0] > 0) CHECK(estimate == steady);  // the budget holds each head within budget + chunk
      }
      size_t untouched = 7;
      kvt::Status st{kvc_cache_estimate_peak_bytes(cache.get(), INT32_MAX, 512, 1, &untouched)};
      CHECK(st.code() == KVC_ERR_INVALID_ARGUMENT);
      CHECK(kvt::contains(st.message(), "prompt_tokens + new_tokens must be at most 2147483647"));
      CHECK(untouched == 7);
    }
  }
}

TEST_CASE("compression: per-chunk prefill keeps each head within budget + chunk (Batch-Max)") {
  constexpr int32_t kBudget = 512, kChunk = 256, kPrompt = 2048, kBlock = 16;
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = f32_params();
  p.dtype = KVC_DTYPE_F16;
  p.block_tokens = kBlock;
  p.policy = "snapkv";
  p.budget = kBudget;
  p.prefill = KVC_PREFILL_PER_CHUNK;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  const size_t token_bytes = 2 * kHeadDim * 2 + sizeof(int32_t);  // K, V, pos
  const size_t block_bytes = kBlock * token_bytes;
  const size_t heads = static_cast<size_t>(kLayers) * kKvHeads;
  const size_t bound_blocks = (kBudget + kChunk + kBlock - 1) / kBlock;
  // Beside the blocks, each head's window statistic is one float array that doubles: 256,
  // 512, then 1024 floats once budget + chunk = 768 tokens are held (old and new array both
  // held while the third chunk is stored), and no larger after that.
  const size_t stats_grown = 1024 * sizeof(float);
  const size_t stats_while_growing = (512 + 1024) * sizeof(float);

  // Layers compress one after another: while one holds budget + chunk, the others hold the
  // budget. The peak is while the last layer stores the third chunk.
  const size_t budget_blocks = kBudget / kBlock;
  const size_t bound_bytes = ((bound_blocks + (kLayers - 1) * budget_blocks) * block_bytes +
                              stats_while_growing + (kLayers - 1) * stats_grown) *
                             kKvHeads;
  size_t estimate = 0;
  REQUIRE(kvc_cache_estimate_peak_bytes(cache.get(), kPrompt, kChunk, 0, &estimate) == nullptr);
  CHECK(estimate == bound_bytes);

  const int32_t seqs[] = {0, 1};
  for (int32_t s : seqs) REQUIRE(kvc_seq_create(cache.get(), s) == nullptr);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int32_t start = 0; start < kPrompt; start += kChunk) {
    const int32_t n_tokens[] = {kChunk, kChunk};
    std::vector<int32_t> positions(2 * kChunk);
    for (int i = 0; i < 2 * kChunk; ++i) positions[static_cast<size_t>(i)] = start + i % kChunk;
    std::vector<float> q(2 * kChunk * kQHeads * kHeadDim), k(2 * kChunk * kKvHeads * kHeadDim),
        v(k.size()), out(q.size());
    for (float& x : q) x = u(rng);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    kvc_batch batch;
    kvc_batch_init(&batch, 2, seqs, n_tokens, positions.data());
    for (int layer = 0; layer < kLayers; ++layer) {
      kvc_tensor tq = kvt::tensor(q.data(), KVC_DTYPE_F32), tk = kvt::tensor(k.data(), KVC_DTYPE_F32),
                 tv = kvt::tensor(v.data(), KVC_DTYPE_F32);
      kvc_tensor_mut to = kvt::tensor_mut(out.data());
      Status s(kvc_append_attend(cache.get(), layer, &batch, &tq, &tk, &tv, nullptr, &to));
      REQUIRE_MESSAGE(s.ok(), s.describe());
      for (int32_t seq : seqs) {
        for (int h = 0; h < kKvHeads; ++h) {
          CHECK(kvt::seq_length(cache.get(), seq, layer, h) == std::min(kBudget, start + kChunk));
        }
      }
    }
    kvc_cache_stats stats = kvt::get_stats(cache.get());
    CHECK(stats.bytes_peak <= 2 * (bound_blocks * block_bytes + stats_while_growing) * heads);
    CHECK(stats.bytes_peak <= 2 * estimate);
    if (start + kChunk > kBudget) CHECK(stats.bytes_peak == 2 * estimate);
    if (start + kChunk > kBudget) {
      // Compression returned the chunk's blocks: in use is the budget again, not budget + chunk.
      CHECK(stats.bytes_used == 2 * ((kBudget / kBlock) * block_bytes + stats_grown) * heads);
      CHECK(stats.bytes_used < stats.bytes_peak);
    }
  }
  size_t full_estimate = 0;
  kvc_cache_params full = f32_params();
  full.dtype = KVC_DTYPE_F16;
  full.block_tokens = kBlock;
  kvt::CachePtr full_cache = kvt::make_cache(ctx.get(), full);
  REQUIRE(kvc_cache_estimate_peak_bytes(full_cache.get(), kPrompt, kChunk, 0, &full_estimate) == nullptr);
  CHECK(full_estimate == kPrompt / kBlock * kBlock * (2 * kHeadDim * 2 + sizeof(int32_t)) * heads);
}

TEST_CASE("compression: manual compress frees blocks at once") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = f32_params();
  p.policy = "window";
  p.budget = 8;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 9) == nullptr);
  cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 1);
  std::mt19937 rng(3);
  step(cache.get(), model, 9, random_inputs(rng, 40, 100));
  kvc_cache_stats before = kvt::get_stats(cache.get());
  int32_t seq = 9;
  Status s(kvc_compress(cache.get(), 1, 1, &seq));
  REQUIRE_MESSAGE(s.ok(), s.describe());
  kvc_cache_stats after = kvt::get_stats(cache.get());
  CHECK(after.bytes_used < before.bytes_used);
  CHECK(after.tokens_evicted == 32 * kKvHeads);
  // window keeps the newest tokens of layer 1 only; layer 0 was not named.
  std::vector<int32_t> expected(8);
  std::iota(expected.begin(), expected.end(), 132);
  CHECK(kvt::stored_positions(cache.get(), 9, 1, 0) == expected);
  CHECK(kvt::seq_length(cache.get(), 9, 0, 0) == 40);
}

TEST_CASE("compression: streaming keeps 4 sinks and the newest tokens") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = f32_params();
  p.policy = "streaming";
  p.budget = 10;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 1) == nullptr);
  cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 1);
  std::mt19937 rng(4);
  step(cache.get(), model, 1, random_inputs(rng, 30, 0));
  int32_t seq = 1;
  REQUIRE(kvc_compress(cache.get(), -1, 1, &seq) == nullptr);
  const std::vector<int32_t> expected = {0, 1, 2, 3, 24, 25, 26, 27, 28, 29};
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) CHECK(kvt::stored_positions(cache.get(), 1, layer, h) == expected);
  }
}

TEST_CASE("compression: prefill 'once' compresses when the first decode token arrives") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = f32_params();
  p.policy = "tova";
  p.budget = 12;
  p.prefill = KVC_PREFILL_ONCE;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 1);
  std::mt19937 rng(6);
  step(cache.get(), model, 0, random_inputs(rng, 20, 0));
  step(cache.get(), model, 0, random_inputs(rng, 20, 20));
  CHECK(kvt::seq_length(cache.get(), 0, 1, 1) == 40);
  // TOVA keeps the tokens the last prompt query attends to most: predict them from the model.
  std::vector<std::set<int32_t>> predicted;
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      const cref::HeadHistory& hh = model.head(layer, h);
      std::vector<size_t> order(hh.tokens());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return hh.attn_last[a] > hh.attn_last[b]; });
      std::set<int32_t> top;
      for (size_t i = 0; i < 12; ++i) top.insert(hh.pos[order[i]]);
      predicted.push_back(top);
    }
  }
  step(cache.get(), model, 0, random_inputs(rng, 1, 40));
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      std::vector<int32_t> kept = kvt::stored_positions(cache.get(), 0, layer, h);
      CHECK(kept.size() == 13);
      std::set<int32_t> kept_prompt(kept.begin(), kept.end() - 1);
      CHECK(kept_prompt == predicted[static_cast<size_t>(layer * kKvHeads + h)]);
      CHECK(kept.back() == 40);
    }
  }
}

TEST_CASE("compression: a failing policy leaves the cache unchanged") {
  kvt::ContextPtr ctx = kvt::make_context(kvt::probe_yaml().c_str());
  kvc_cache_params p = f32_params();
  p.policy = "stats_probe";
  p.budget = 4;
  kvc_key_value params[] = {{"fail", "1"}};
  p.policy_params = params;
  p.n_policy_params = 1;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 4);
  std::mt19937 rng(8);
  step(cache.get(), model, 0, random_inputs(rng, 20, 0));
  kvc_cache_stats before = kvt::get_stats(cache.get());
  std::vector<int32_t> positions_before = kvt::stored_positions(cache.get(), 0, 1, 1);
  int32_t seq = 0;
  Status s(kvc_compress(cache.get(), -1, 1, &seq));
  CHECK(s.code() == KVC_ERR_PLUGIN);
  CHECK(kvt::contains(s.message(), "stats_probe was told to fail"));
  CHECK(kvt::stats_equal(before, kvt::get_stats(cache.get())));
  CHECK(kvt::stored_positions(cache.get(), 0, 1, 1) == positions_before);
  // The stored data is intact: attention still matches the uncompressed reference.
  CHECK(step(cache.get(), model, 0, random_inputs(rng, 1, 20)) < 1e-5);
}

TEST_CASE("compression: unknown policies and bad parameters are clear errors") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = f32_params();
  kvc_cache* cache = nullptr;
  p.policy = "no_such_policy";
  p.budget = 8;
  Status unknown(kvc_cache_create(ctx.get(), &p, &cache));
  CHECK(unknown.code() == KVC_ERR_NOT_FOUND);
  CHECK(kvt::contains(unknown.message(), "no_such_policy"));
  CHECK(kvt::contains(unknown.message(), "snapkv"));  // lists the loaded ones
  CHECK(cache == nullptr);

  p.policy = "snapkv";
  kvc_key_value bad[] = {{"kernel", "4"}};
  p.policy_params = bad;
  p.n_policy_params = 1;
  Status bad_param(kvc_cache_create(ctx.get(), &p, &cache));
  CHECK(bad_param.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(bad_param.message(), "kernel"));
  CHECK(cache == nullptr);

  p.n_policy_params = 0;
  p.budget = 0;
  Status no_budget(kvc_cache_create(ctx.get(), &p, &cache));
  CHECK(no_budget.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(no_budget.message(), "budget"));

  Status yaml(kvc_cache_create_from_yaml(
      ctx.get(), "cache: { layers: 1 }\npolicy: { name: h2o, budget: 8, params: { bogus: 1 } }\n", &cache));
  CHECK(yaml.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(yaml.message(), "bogus"));
}

TEST_CASE("compression: wrapping policies take their own parameters and set budgets") {
  kvt::ContextPtr ctx = kvt::make_context();
  std::mt19937 rng(12);
  SUBCASE("pyramidkv: budgets fall linearly over layers") {
    kvc_cache_params p = f32_params();
    p.policy = "pyramidkv";
    p.budget = 40;
    p.sinks = 0;
    p.recent = 0;
    kvc_key_value params[] = {{"beta", "4"}, {"window", "8"}};
    p.policy_params = params;
    p.n_policy_params = 2;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
    cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 8);
    step(cache.get(), model, 0, random_inputs(rng, 100, 0));
    int32_t seq = 0;
    Status s(kvc_compress(cache.get(), -1, 1, &seq));
    REQUIRE_MESSAGE(s.ok(), s.describe());
    // b_min = 40 / 4 = 10 and b_max = 2 * 40 - 10 = 70: layer 0 keeps 70, layer 1 keeps 10.
    for (int h = 0; h < kKvHeads; ++h) {
      CHECK(kvt::seq_length(cache.get(), 0, 0, h) == 70);
      CHECK(kvt::seq_length(cache.get(), 0, 1, h) == 10);
    }
  }
  SUBCASE("adakv: a layer's heads share its budget") {
    kvc_cache_params p = f32_params();
    p.policy = "adakv";
    p.budget = 20;
    kvc_key_value params[] = {{"floor", "0.5"}, {"scorer", "snapkv"}, {"window", "8"}};
    p.policy_params = params;
    p.n_policy_params = 3;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
    cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 8);
    step(cache.get(), model, 0, random_inputs(rng, 60, 0));
    int32_t seq = 0;
    Status s(kvc_compress(cache.get(), -1, 1, &seq));
    REQUIRE_MESSAGE(s.ok(), s.describe());
    for (int layer = 0; layer < kLayers; ++layer) {
      int32_t total = 0;
      for (int h = 0; h < kKvHeads; ++h) {
        int32_t n = kvt::seq_length(cache.get(), 0, layer, h);
        CHECK(n >= 8 + 6);  // the window (8) plus the floor: half of the other 12
        total += n;
      }
      CHECK(total == 20 * kKvHeads);
    }
  }
}

TEST_CASE("compression: a wrapper gets its scorer's default sinks, recent and statistics") {
  kvt::ContextPtr ctx = kvt::make_context();
  struct Case {
    const char* policy;
    std::vector<kvc_key_value> params;
    int32_t sinks, recent;
    uint32_t stats;
    int32_t window;
  };
  const std::vector<Case> cases = {
      {"pyramidkv", {{"window", "16"}}, 0, 16, KVC_STAT_KIND_ATTN_WINDOW, 16},
      {"adakv", {}, 0, 32, KVC_STAT_KIND_ATTN_WINDOW, 32},
      {"adakv", {{"scorer", "streaming"}}, 4, 0, 0, 0},
      {"adakv", {{"scorer", "h2o"}}, 0, 0, KVC_STAT_KIND_ATTN_SUM, 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.policy);
    CAPTURE(c.sinks);
    kvc_cache_params p = f32_params();
    p.policy = c.policy;
    p.budget = 64;
    p.policy_params = c.params.data();
    p.n_policy_params = c.params.size();
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    kvc_policy_info info;
    kvc_policy_info_init(&info);
    KVT_CHECK_OK(kvc_cache_policy_info(cache.get(), &info));
    CHECK(info.sinks == c.sinks);
    CHECK(info.recent == c.recent);
    CHECK(info.stats == c.stats);
    if (c.window > 0) CHECK(info.observation_window == c.window);
  }
}

#ifdef KVC_EXAMPLE_C_POLICY_PLUGIN
TEST_CASE("compression: a custom C policy loaded through YAML follows its rule") {
  const std::string yaml = std::string("plugins: { paths: [") + KVC_EXAMPLE_C_POLICY_PLUGIN +
                           "] }\n"
                           "cache: { layers: 2, kv_heads: 2, q_heads: 4, head_dim: 16, dtype: f32 }\n"
                           "policy: { name: age_normalised, budget: 10, params: { power: 1.0 } }\n";
  kvt::ContextPtr ctx = kvt::make_context(yaml.c_str());
  kvc_cache* raw = nullptr;
  Status created(kvc_cache_create_from_yaml(ctx.get(), nullptr, &raw));
  REQUIRE_MESSAGE(created.ok(), created.describe());
  kvt::CachePtr cache(raw);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  cref::SequenceModel model(kLayers, kKvHeads, kQHeads, kHeadDim, 1);
  std::mt19937 rng(10);
  step(cache.get(), model, 0, random_inputs(rng, 12, 0));
  step(cache.get(), model, 0, random_inputs(rng, 12, 12));
  int32_t seq = 0;
  REQUIRE(kvc_compress(cache.get(), -1, 1, &seq) == nullptr);
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      const cref::HeadHistory& hh = model.head(layer, h);
      const int32_t newest = hh.pos.back();
      std::vector<std::pair<double, int32_t>> scored;
      for (size_t j = 0; j < hh.tokens(); ++j) {
        scored.emplace_back(hh.attn_sum[j] / (newest - hh.pos[j] + 1), hh.pos[j]);
      }
      std::sort(scored.rbegin(), scored.rend());
      std::set<int32_t> expected;
      for (size_t i = 0; i < 10; ++i) expected.insert(scored[i].second);
      std::vector<int32_t> kept = kvt::stored_positions(cache.get(), 0, layer, h);
      CHECK(std::set<int32_t>(kept.begin(), kept.end()) == expected);
    }
  }
}
#endif

namespace {

// append_attend of one chunk of sequence `seq` on one layer, marked as the prompt's end or not.
Status store_chunk(kvc_cache* cache, int layer, int32_t seq, const Inputs& in, bool prompt_end) {
  int32_t n = static_cast<int32_t>(in.pos.size());
  const int32_t end = prompt_end ? 1 : 0;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, in.pos.data());
  batch.prompt_end = &end;
  std::vector<float> out(in.q.size());
  kvc_tensor q = kvt::tensor(in.q.data(), KVC_DTYPE_F32);
  kvc_tensor k = kvt::tensor(in.k.data(), KVC_DTYPE_F32);
  kvc_tensor v = kvt::tensor(in.v.data(), KVC_DTYPE_F32);
  kvc_tensor_mut o = kvt::tensor_mut(out.data());
  return Status(kvc_append_attend(cache, layer, &batch, &q, &k, &v, nullptr, &o));
}

std::vector<std::vector<int32_t>> all_positions(kvc_cache* cache, int32_t seq) {
  std::vector<std::vector<int32_t>> heads;
  for (const kvc::HeadImage& head : kvt::stored_sequence(cache, seq).heads) {
    heads.push_back(head.positions);
  }
  return heads;
}

}  // namespace

TEST_CASE("compression: 'once' with a marked last prompt chunk compresses each layer right after it") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = f32_params();
  p.policy = "tova";
  p.budget = 12;
  p.prefill = KVC_PREFILL_ONCE;
  kvt::CachePtr marked = kvt::make_cache(ctx.get(), p);
  kvt::CachePtr unmarked = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(marked.get(), 0) == nullptr);
  REQUIRE(kvc_seq_create(unmarked.get(), 0) == nullptr);
  std::mt19937 rng(16);
  const Inputs first = random_inputs(rng, 20, 0), last = random_inputs(rng, 20, 20);
  const Inputs decode = random_inputs(rng, 1, 40);
  for (int layer = 0; layer < kLayers; ++layer) {
    REQUIRE(store_chunk(marked.get(), layer, 0, first, false).ok());
    REQUIRE(store_chunk(unmarked.get(), layer, 0, first, false).ok());
  }
  for (int layer = 0; layer < kLayers; ++layer) {
    Status s = store_chunk(marked.get(), layer, 0, last, true);
    REQUIRE_MESSAGE(s.ok(), s.describe());
    REQUIRE(store_chunk(unmarked.get(), layer, 0, last, false).ok());
    for (int h = 0; h < kKvHeads; ++h) {
      CHECK(kvt::seq_length(marked.get(), 0, layer, h) == 12);  // compressed at once
      CHECK(kvt::seq_length(unmarked.get(), 0, layer, h) == 40);
      if (layer + 1 < kLayers) CHECK(kvt::seq_length(marked.get(), 0, layer + 1, h) == 20);
    }
  }
  // The unmarked cache compresses the same statistics when the first decode token arrives, so
  // both keep the same tokens; the marked one does not compress again.
  for (int layer = 0; layer < kLayers; ++layer) {
    REQUIRE(store_chunk(marked.get(), layer, 0, decode, false).ok());
    REQUIRE(store_chunk(unmarked.get(), layer, 0, decode, false).ok());
  }
  CHECK(all_positions(marked.get(), 0) == all_positions(unmarked.get(), 0));
  CHECK(kvt::get_stats(marked.get()).tokens_evicted == kvt::get_stats(unmarked.get()).tokens_evicted);
  for (int h = 0; h < kKvHeads; ++h) CHECK(kvt::seq_length(marked.get(), 0, 1, h) == 13);
}

TEST_CASE("compression: a marked one-token chunk is a prompt chunk, not a decode step") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = f32_params();
  p.policy = "window";
  p.budget = 8;
  p.sinks = 0;
  p.recent = 0;
  for (kvc_prefill_compression mode : {KVC_PREFILL_ONCE, KVC_PREFILL_PER_CHUNK}) {
    CAPTURE(mode);
    p.prefill = mode;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    REQUIRE(kvc_seq_create(cache.get(), 3) == nullptr);
    std::mt19937 rng(17);
    const Inputs prompt = random_inputs(rng, 20, 0), tail = random_inputs(rng, 1, 20);
    for (int layer = 0; layer < kLayers; ++layer) REQUIRE(store_chunk(cache.get(), layer, 3, prompt, false).ok());
    for (int layer = 0; layer < kLayers; ++layer) REQUIRE(store_chunk(cache.get(), layer, 3, tail, true).ok());
    // Compressed after the last token arrived, to the budget: the newest 8, 13..20. Taken as a
    // decode step, 'once' would have compressed before storing it (9 tokens, 12..20) and
    // per_chunk not at all after it (with 8 kept from the prompt: 12..20 too).
    std::vector<int32_t> expected(8);
    std::iota(expected.begin(), expected.end(), 13);
    for (const std::vector<int32_t>& kept : all_positions(cache.get(), 3)) CHECK(kept == expected);
  }
}

TEST_CASE("compression: the estimate follows a marked whole-prompt prefill (kvpress's way)") {
  constexpr int32_t kPrompt = 2048, kBudget = 512, kBlock = 16;
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = f32_params();
  p.dtype = KVC_DTYPE_F16;
  p.block_tokens = kBlock;
  p.policy = "knorm";  // reads keys at compression time: no statistics arrays beside the blocks
  p.budget = kBudget;
  p.prefill = KVC_PREFILL_ONCE;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  kvc_estimate_request request;
  kvc_estimate_request_init(&request, kPrompt, kPrompt, 4);
  size_t unmarked = 0, legacy = 0, marked = 0;
  REQUIRE(kvc_cache_estimate(cache.get(), &request, &unmarked) == nullptr);
  REQUIRE(kvc_cache_estimate_peak_bytes(cache.get(), kPrompt, kPrompt, 4, &legacy) == nullptr);
  CHECK(unmarked == legacy);
  request.marks_prompt_end = 1;
  REQUIRE(kvc_cache_estimate(cache.get(), &request, &marked) == nullptr);
  // One layer holds the whole prompt while the others hold their budget.
  const size_t token_bytes = 2 * kHeadDim * 2 + sizeof(int32_t);
  CHECK(marked == (kPrompt + (kLayers - 1) * kBudget) * token_bytes * kKvHeads);
  CHECK(unmarked == kLayers * kPrompt * token_bytes * kKvHeads);

  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(18);
  const Inputs prompt = random_inputs(rng, kPrompt, 0);
  for (int layer = 0; layer < kLayers; ++layer) {
    Status s = store_chunk(cache.get(), layer, 0, prompt, true);
    REQUIRE_MESSAGE(s.ok(), s.describe());
  }
  for (int32_t t = 0; t < 4; ++t) {
    const Inputs token = random_inputs(rng, 1, kPrompt + t);
    for (int layer = 0; layer < kLayers; ++layer) REQUIRE(store_chunk(cache.get(), layer, 0, token, false).ok());
  }
  CHECK(kvt::get_stats(cache.get()).bytes_peak == marked);
}

TEST_CASE("compression: prompt_end entries other than 0 and 1 are refused, storing nothing") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), f32_params());
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(19);
  const Inputs in = random_inputs(rng, 4, 0);
  int32_t n = 4, seq = 0;
  const int32_t end = 2;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, in.pos.data());
  CHECK(batch.prompt_end == nullptr);
  batch.prompt_end = &end;
  kvc_tensor k = kvt::tensor(in.k.data(), KVC_DTYPE_F32), v = kvt::tensor(in.v.data(), KVC_DTYPE_F32);
  Status s(kvc_append(cache.get(), 0, &batch, &k, &v));
  CHECK(s.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(s.message().find("batch.prompt_end[0] must be 0 or 1, got 2") != std::string::npos);
  CHECK(kvt::seq_length(cache.get(), 0, 0, 0) == 0);
}
