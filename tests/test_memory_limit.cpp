// The memory limit: appends, reserves and growth that would pass it fail with
// OUT_OF_MEMORY and change nothing (stats and stored data); removal returns memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "reference_attention.hpp"
#include "test_support.hpp"

namespace {

// A cache of f32 storage on one layer, with a reference copy of what it holds.
class Store {
 public:
  Store(kvc_context* ctx, kvc_layout layout, size_t limit, int kv_heads, int block_tokens = 16,
        double growth = 2.0)
      : kvh_(kv_heads) {
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = 1;
    p.kv_heads = kv_heads;
    p.q_heads = 2 * kv_heads;
    p.head_dim = kD;
    p.dtype = KVC_DTYPE_F32;
    p.layout = layout;
    p.block_tokens = block_tokens;
    p.growth_factor = growth;
    p.memory_limit = limit;
    cache_ = kvt::make_cache(ctx, p);
  }

  kvc_cache* get() { return cache_.get(); }

  void create(int32_t seq) {
    KVT_REQUIRE_OK(kvc_seq_create(cache_.get(), seq));
    hist_[seq] = ref::History(kvh_, kD);
    next_[seq] = 0;
  }

  void remove(int32_t seq) {
    KVT_REQUIRE_OK(kvc_seq_remove(cache_.get(), seq));
    hist_.erase(seq);
    next_.erase(seq);
  }

  // Appends ntok[i] random tokens to seqs[i]; with `combined`, through kvc_append_attend
  // (whose output goes to *out). The reference copy is updated only on success.
  kvt::Status append(const std::vector<int32_t>& seqs, const std::vector<int32_t>& ntok,
                     bool combined = false, std::vector<float>* out = nullptr) {
    std::vector<int32_t> pos;
    for (size_t i = 0; i < seqs.size(); ++i)
      for (int32_t j = 0; j < ntok[i]; ++j) pos.push_back(next_[seqs[i]] + j);
    const size_t w = static_cast<size_t>(kvh_) * kD;
    const std::vector<float> k = rng_.vec(pos.size() * w), v = rng_.vec(pos.size() * w);
    kvc_batch b;
    kvc_batch_init(&b, static_cast<int32_t>(seqs.size()), seqs.data(), ntok.data(), pos.data());
    const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
    const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
    kvc_status* raw;
    if (combined) {
      const std::vector<float> q = rng_.vec(pos.size() * 2 * w);
      const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
      REQUIRE(out != nullptr);
      out->assign(pos.size() * 2 * w, -42.0f);
      kvc_tensor_mut ot = kvt::tensor_mut(out->data());
      kvc_attention_params ap;
      kvc_attention_params_init(&ap);
      raw = kvc_append_attend(cache_.get(), 0, &b, &qt, &kt, &vt, &ap, &ot);
    } else {
      raw = kvc_append(cache_.get(), 0, &b, &kt, &vt);
    }
    kvt::Status st{raw};
    if (st.ok()) {
      size_t row = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        for (int32_t j = 0; j < ntok[i]; ++j, ++row)
          hist_[seqs[i]].append(pos[row], &k[row * w], &v[row * w]);
        next_[seqs[i]] += ntok[i];
      }
    }
    return st;
  }

  // Attention outputs of fixed queries at every stored position of a sequence.
  std::vector<float> snapshot(int32_t seq) {
    const ref::History& h = hist_.at(seq);
    if (h.tokens() == 0) return {};
    const int32_t n = static_cast<int32_t>(h.tokens());
    const size_t qw = static_cast<size_t>(2 * kvh_) * kD;
    ref::Rng qrng(static_cast<uint32_t>(seq) + 17u);
    const std::vector<float> q = qrng.vec(n * qw);
    std::vector<float> out(n * qw, -1.0f);
    kvc_batch b;
    kvc_batch_init(&b, 1, &seq, &n, h.pos.data());
    const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
    kvc_tensor_mut ot = kvt::tensor_mut(out.data());
    kvc_attention_params ap;
    kvc_attention_params_init(&ap);
    KVT_REQUIRE_OK(kvc_attend(cache_.get(), 0, &b, &qt, &ap, &ot));
    return out;
  }

  // The stored data equals the reference (attention within f32 tolerance).
  void check_against_reference(int32_t seq) {
    const std::vector<float> out = snapshot(seq);
    const ref::History& h = hist_.at(seq);
    const size_t qw = static_cast<size_t>(2 * kvh_) * kD;
    ref::Rng qrng(static_cast<uint32_t>(seq) + 17u);
    const std::vector<float> q = qrng.vec(h.tokens() * qw);
    std::vector<double> expect(qw);
    double err = 0.0;
    for (size_t t = 0; t < h.tokens(); ++t) {
      ref::attend(h, 2 * kvh_, &q[t * qw], h.pos[t], ref::Options{}, expect.data());
      for (size_t e = 0; e < qw; ++e) err = std::max(err, std::fabs(out[t * qw + e] - expect[e]));
    }
    INFO("seq " << seq);
    CHECK(err <= 1e-5);
  }

  int32_t length(int32_t seq) { return static_cast<int32_t>(hist_.at(seq).tokens()); }

  void check_lengths() {
    for (auto& kv : hist_)
      for (int h = 0; h < kvh_; ++h) {
        INFO("seq " << kv.first << " head " << h);
        CHECK(kvt::seq_length(cache_.get(), kv.first, 0, h) == static_cast<int32_t>(kv.second.tokens()));
      }
  }

  static constexpr int kD = 8;

 private:
  int kvh_;
  kvt::CachePtr cache_;
  std::map<int32_t, ref::History> hist_;
  std::map<int32_t, int32_t> next_;
  ref::Rng rng_{4242};
};

// Everything observable about a cache: stats, lengths and attention outputs of every sequence.
struct Observed {
  kvc_cache_stats stats;
  std::map<int32_t, std::vector<float>> outputs;
};

Observed observe(Store& s, const std::vector<int32_t>& seqs) {
  Observed o;
  o.stats = kvt::get_stats(s.get());
  for (int32_t id : seqs) o.outputs[id] = s.snapshot(id);
  return o;
}

void check_unchanged(Store& s, const Observed& before, const std::vector<int32_t>& seqs,
                     const char* what) {
  INFO("after the failed " << what);
  const kvc_cache_stats now = kvt::get_stats(s.get());
  INFO("before " << kvt::stats_string(before.stats));
  INFO("now    " << kvt::stats_string(now));
  CHECK(kvt::stats_equal(before.stats, now));
  s.check_lengths();
  for (int32_t id : seqs) {
    INFO("seq " << id);
    CHECK(s.snapshot(id) == before.outputs.at(id));
  }
}

#define CHECK_OOM(expr)                                                 \
  do {                                                                  \
    ::kvt::Status st_{(expr)};                                          \
    INFO(#expr " returned " << st_.describe());                         \
    CHECK(st_.code() == KVC_ERR_OUT_OF_MEMORY);                         \
    CHECK(!st_.message().empty());                                      \
  } while (0)

#define CHECK_STATUS_OK(expr)                                           \
  do {                                                                  \
    ::kvt::Status st_{(expr)};                                          \
    INFO(#expr " returned " << st_.describe());                         \
    CHECK(st_.ok());                                                    \
  } while (0)

// Bytes of one block of the given shape (paged), measured on an unlimited cache.
size_t measure_block_bytes(kvc_context* ctx, int kv_heads, int block_tokens) {
  Store probe(ctx, KVC_LAYOUT_PAGED, size_t{1} << 30, kv_heads, block_tokens);
  probe.create(0);
  CHECK_STATUS_OK(probe.append({0}, {1}));
  const kvc_cache_stats s1 = kvt::get_stats(probe.get());
  REQUIRE(s1.blocks_used == static_cast<size_t>(kv_heads));  // one block per KV head
  REQUIRE(s1.bytes_used % s1.blocks_used == 0);
  const size_t block = s1.bytes_used / s1.blocks_used;
  // K and V of every token of the block, plus at least its position.
  CHECK(block >= static_cast<size_t>(block_tokens) * (2 * Store::kD * sizeof(float) + sizeof(int32_t)));
  CHECK(s1.tokens_stored == static_cast<uint64_t>(kv_heads));
  // The block fills without a new allocation, then a second block per head is taken.
  CHECK_STATUS_OK(probe.append({0}, {block_tokens - 1}));
  CHECK(kvt::get_stats(probe.get()).blocks_used == static_cast<size_t>(kv_heads));
  CHECK(kvt::get_stats(probe.get()).bytes_used == block * kv_heads);
  CHECK_STATUS_OK(probe.append({0}, {1}));
  const kvc_cache_stats s2 = kvt::get_stats(probe.get());
  CHECK(s2.blocks_used == static_cast<size_t>(2 * kv_heads));
  CHECK(s2.bytes_used == 2 * block * kv_heads);
  CHECK(s2.bytes_copied == 0);  // paged growth never copies
  return block;
}

}  // namespace

TEST_CASE("memory limit: paged appends, reserves and removal") {
  kvt::ContextPtr ctx = kvt::make_context();
  const int KVH = 2, BT = 16;
  const size_t B = measure_block_bytes(ctx.get(), KVH, BT);
  const size_t limit = 8 * B + B / 2;  // room for 8 blocks, not 9
  Store s(ctx.get(), KVC_LAYOUT_PAGED, limit, KVH, BT);
  const int32_t A = 1, Bq = 2, C = 3;

  kvc_cache_stats st = kvt::get_stats(s.get());
  CHECK(st.bytes_limit == limit);
  CHECK(st.bytes_used == 0);
  CHECK(st.tokens_stored == 0);
  CHECK(st.blocks_used == 0);
  CHECK(st.blocks_free == 8);
  CHECK(st.sequences == 0);

  s.create(A);
  s.create(Bq);
  s.create(C);
  CHECK_STATUS_OK(s.append({A, Bq, C}, {16, 16, 16}));
  st = kvt::get_stats(s.get());
  CHECK(st.bytes_used == 6 * B);
  CHECK(st.blocks_used == 6);
  CHECK(st.blocks_free == 2);
  CHECK(st.tokens_stored == 3 * 16 * KVH);
  CHECK(st.sequences == 3);
  CHECK(st.bytes_peak >= st.bytes_used);

  const std::vector<int32_t> all = {A, Bq, C};
  Observed before = observe(s, all);

  // A alone would fit (2 blocks); B, last in the batch, would not: nothing may change.
  CHECK_OOM(s.append({A, Bq}, {1, 1}));
  check_unchanged(s, before, all, "batch append [A:1, B:1]");

  // The same through kvc_append_attend: the output stays untouched too.
  {
    std::vector<float> out;
    CHECK_OOM(s.append({A, Bq}, {1, 1}, true, &out));
    bool untouched = true;
    for (float x : out) untouched = untouched && x == -42.0f;
    CHECK_MESSAGE(untouched, "kvc_append_attend wrote its output although it failed");
    check_unchanged(s, before, all, "batch append_attend [A:1, B:1]");
  }

  // One sequence whose chunk needs 3 blocks per head.
  CHECK_OOM(s.append({A}, {33}));
  check_unchanged(s, before, all, "append [A:33]");

  // Reserving past the limit.
  CHECK_OOM(kvc_seq_reserve(s.get(), A, 1000));
  check_unchanged(s, before, all, "reserve(A, 1000)");
  CHECK_OOM(kvc_seq_reserve(s.get(), A, 33));
  check_unchanged(s, before, all, "reserve(A, 33)");
  // Reserving what is already held changes nothing.
  CHECK_STATUS_OK(kvc_seq_reserve(s.get(), A, 16));
  check_unchanged(s, before, all, "(successful) reserve(A, 16)");

  // Removing C gives its 2 blocks back; the failed batch now succeeds.
  s.remove(C);
  st = kvt::get_stats(s.get());
  CHECK(st.bytes_used == 4 * B);
  CHECK(st.blocks_used == 4);
  CHECK(st.blocks_free == 4);
  CHECK(st.tokens_stored == 2 * 16 * KVH);
  CHECK(st.sequences == 2);
  CHECK(st.bytes_peak == 6 * B);
  CHECK_STATUS_OK(s.append({A, Bq}, {1, 1}));
  st = kvt::get_stats(s.get());
  CHECK(st.bytes_used == 8 * B);
  CHECK(st.blocks_free == 0);
  CHECK(st.bytes_peak == 8 * B);
  CHECK(st.tokens_stored == 2 * 17 * KVH);
  s.check_lengths();
  s.check_against_reference(A);
  s.check_against_reference(Bq);

  // Full: A's blocks hold 32 tokens per head, so reserving 32 needs nothing new; 33 does.
  before = observe(s, {A, Bq});
  CHECK_STATUS_OK(kvc_seq_reserve(s.get(), A, 32));
  check_unchanged(s, before, {A, Bq}, "(successful) reserve(A, 32)");
  CHECK_OOM(kvc_seq_reserve(s.get(), A, 33));
  check_unchanged(s, before, {A, Bq}, "reserve(A, 33) when full");
  CHECK_OOM(s.append({Bq}, {16}));
  check_unchanged(s, before, {A, Bq}, "append [B:16] when full");

  // After removing B, A reserves 64 tokens per head: 4 blocks per head, all of the pool.
  s.remove(Bq);
  CHECK(kvt::get_stats(s.get()).bytes_used == 4 * B);
  CHECK_STATUS_OK(kvc_seq_reserve(s.get(), A, 64));
  st = kvt::get_stats(s.get());
  CHECK(st.bytes_used == 8 * B);
  CHECK(st.blocks_free == 0);
  CHECK(st.tokens_stored == 17 * KVH);  // reserving stores no token
  s.check_lengths();
  // Reserved memory is A's: another sequence cannot take it ...
  const int32_t D = 4;
  s.create(D);
  before = observe(s, {A});
  CHECK_OOM(s.append({D}, {1}));
  check_unchanged(s, before, {A}, "append [D:1] with everything reserved by A");
  // ... and A fills it without allocating.
  CHECK_STATUS_OK(s.append({A}, {47}));
  st = kvt::get_stats(s.get());
  CHECK(st.bytes_used == 8 * B);
  CHECK(st.tokens_stored == 64 * KVH);
  s.check_against_reference(A);
  before = observe(s, {A});
  CHECK_OOM(s.append({A}, {1}));
  check_unchanged(s, before, {A}, "append [A:1] past its reservation");

  // Removing A returns everything; the peak stays.
  s.remove(A);
  st = kvt::get_stats(s.get());
  CHECK(st.bytes_used == 0);
  CHECK(st.blocks_used == 0);
  CHECK(st.blocks_free == 8);
  CHECK(st.tokens_stored == 0);
  CHECK(st.bytes_peak == 8 * B);
  CHECK(st.sequences == 1);
  CHECK_STATUS_OK(s.append({D}, {1}));
  s.check_against_reference(D);
}

TEST_CASE("memory limit: tokens_stored and blocks sum over layers and KV heads") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 3;
  p.kv_heads = 2;
  p.q_heads = 2;
  p.head_dim = 8;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 4;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 1));
  ref::Rng rng(5);
  auto append = [&](int32_t seq, int32_t layer, int32_t n) {
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = i;
    std::vector<float> k = rng.vec(n * 16), v = rng.vec(n * 16);
    kvc_batch b;
    kvc_batch_init(&b, 1, &seq, &n, pos.data());
    const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32), vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
    KVT_REQUIRE_OK(kvc_append(cache.get(), layer, &b, &kt, &vt));
  };
  append(0, 0, 5);  // 2 blocks per head
  append(0, 2, 7);  // 2 blocks per head
  append(1, 1, 4);  // 1 block per head
  kvc_cache_stats s = kvt::get_stats(cache.get());
  CHECK(s.tokens_stored == (5 + 7 + 4) * 2);
  CHECK(s.blocks_used == (2 + 2 + 1) * 2);
  CHECK(s.sequences == 2);
  CHECK(s.bytes_used % s.blocks_used == 0);
  const size_t block = s.bytes_used / s.blocks_used;
  CHECK(s.blocks_free == (s.bytes_limit - s.bytes_used) / block);
  CHECK(kvt::seq_length(cache.get(), 0, 0, 1) == 5);
  CHECK(kvt::seq_length(cache.get(), 0, 1, 0) == 0);
  CHECK(kvt::seq_length(cache.get(), 0, 2, 0) == 7);
  CHECK(kvt::seq_length(cache.get(), 1, 1, 1) == 4);
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 0));
  s = kvt::get_stats(cache.get());
  CHECK(s.tokens_stored == 4 * 2);
  CHECK(s.blocks_used == 2);
  CHECK(s.bytes_used == 2 * block);
  CHECK(s.bytes_peak == 10 * block);
  CHECK(s.sequences == 1);
}

TEST_CASE("memory limit: contiguous growth that would pass the limit fails cleanly") {
  kvt::ContextPtr ctx = kvt::make_context();
  const int KVH = 2, N = 64;
  for (double growth : {2.0, 1.5}) {
    INFO("growth_factor " << growth);
    // Probe the growth pattern on an unlimited cache, one token at a time.
    std::vector<size_t> U(N + 1), copied(N + 1);
    std::vector<int> grew;
    {
      Store probe(ctx.get(), KVC_LAYOUT_CONTIGUOUS, size_t{1} << 30, KVH, 16, growth);
      probe.create(0);
      U[0] = kvt::get_stats(probe.get()).bytes_used;
      copied[0] = kvt::get_stats(probe.get()).bytes_copied;
      for (int n = 1; n <= N; ++n) {
        {
          const kvt::Status a = probe.append({0}, {1});
          if (!a.ok()) FAIL("probe append " << n << ": " << a.describe());
        }
        const kvc_cache_stats s = kvt::get_stats(probe.get());
        U[n] = s.bytes_used;
        copied[n] = s.bytes_copied;
        CHECK(U[n] >= U[n - 1]);
        // The peak may count the old and the new segment during a growth's copy.
        CHECK(s.bytes_peak >= U[n]);
        CHECK(s.bytes_peak <= 2 * U[n]);
        CHECK(s.tokens_stored == static_cast<uint64_t>(n * KVH));
        if (U[n] > U[n - 1]) grew.push_back(n);
        if (n > 1) {
          INFO("token " << n);
          // Growth of a non-empty segment copies; an append into spare capacity does not.
          if (U[n] > U[n - 1]) CHECK(copied[n] > copied[n - 1]);
          else CHECK(copied[n] == copied[n - 1]);
        }
      }
      // Capacity grows geometrically: few growth events.
      const int max_growths = static_cast<int>(std::ceil(std::log(N) / std::log(growth))) + 3;
      CHECK(static_cast<int>(grew.size()) <= max_growths);
      CHECK(U[N] >= static_cast<size_t>(N) * KVH * 2 * Store::kD * sizeof(float));
      if (growth == 2.0) CHECK(copied[N] <= U[N]);  // amortised: copies < final capacity
      probe.check_against_reference(0);
    }

    // A growth step n >= 8 of the probe; the limit sits just below its size.
    int n = -1;
    for (int g : grew)
      if (g >= 8) {
        n = g;
        break;
      }
    REQUIRE(n > 0);
    const size_t limit = U[n] - 1;
    INFO("limit " << limit << " growth at token " << n);

    Store s(ctx.get(), KVC_LAYOUT_CONTIGUOUS, limit, KVH, 16, growth);
    const size_t min_token_bytes = KVH * 2 * Store::kD * sizeof(float);  // K and V of one token
    const int32_t Y = 7, X = 8, Z = 9, W = 10;
    s.create(Y);
    // One token at a time until the first failure. Without a limit the growth at token n
    // passes it, so a failure must come; where exactly depends on how the library accounts
    // for the copy (old + new segment) and whether it grows by less than the factor when
    // memory is short. Whatever it does, nothing may pass the limit, and the failing append
    // changes nothing.
    int m = -1;
    Observed before;
    for (int i = 1; i <= 4 * n; ++i) {
      const Observed snap = observe(s, {Y});
      kvt::Status a = s.append({Y}, {1});
      if (!a.ok()) {
        INFO("append of token " << i << ": " << a.describe());
        CHECK(a.code() == KVC_ERR_OUT_OF_MEMORY);
        m = i;
        before = snap;
        break;
      }
      const kvc_cache_stats st = kvt::get_stats(s.get());
      INFO("after token " << i << ": " << kvt::stats_string(st));
      CHECK(st.bytes_used <= limit);
      CHECK(st.bytes_peak <= limit);
      CHECK(st.bytes_used >= static_cast<size_t>(i) * min_token_bytes);
    }
    REQUIRE_MESSAGE(m > 0, "appending past the limit never failed");
    CHECK(static_cast<size_t>(m - 1) * min_token_bytes <= limit);
    MESSAGE("growth " << growth << ": limit " << limit << " refused token " << m
                      << " (factor growth passes the limit at token " << n << ")");
    check_unchanged(s, before, {Y}, "growing append [Y:1]");
    CHECK_OOM(s.append({Y}, {5}));
    check_unchanged(s, before, {Y}, "growing append [Y:5]");
    CHECK_OOM(kvc_seq_reserve(s.get(), Y, 8 * n));
    check_unchanged(s, before, {Y}, "reserve(Y, 8n)");
    s.check_against_reference(Y);

    // Removing Y returns all its memory.
    s.remove(Y);
    kvc_cache_stats st = kvt::get_stats(s.get());
    CHECK(st.bytes_used == 0);
    CHECK(st.tokens_stored == 0);
    CHECK(st.sequences == 0);

    // X (first in the batch) would fit, Z (last) would not: X is unchanged too.
    s.create(X);
    s.create(Z);
    CHECK_STATUS_OK(s.append({X}, {1}));
    CHECK_STATUS_OK(s.append({Z}, {3}));
    before = observe(s, {X, Z});
    const int32_t too_many = static_cast<int32_t>(limit / min_token_bytes) + 1;
    CHECK_OOM(s.append({X, Z}, {1, too_many}));
    check_unchanged(s, before, {X, Z}, "batch append [X:1, Z:too many]");
    CHECK_STATUS_OK(s.append({X}, {1}));  // alone it fits
    s.check_against_reference(X);
    s.check_against_reference(Z);
    st = kvt::get_stats(s.get());
    CHECK(st.bytes_used <= limit);
    CHECK(st.bytes_peak >= st.bytes_used);
    CHECK(st.tokens_stored == static_cast<uint64_t>((2 + 3) * KVH));

    // reserve pre-sizes: afterwards, appends up to the reservation neither grow nor copy.
    Store big(ctx.get(), KVC_LAYOUT_CONTIGUOUS, size_t{1} << 30, KVH, 16, growth);
    big.create(W);
    const int32_t want = 3 * n;
    CHECK_STATUS_OK(kvc_seq_reserve(big.get(), W, want));
    const kvc_cache_stats reserved = kvt::get_stats(big.get());
    CHECK(reserved.bytes_used >= static_cast<size_t>(want) * min_token_bytes);
    CHECK(reserved.tokens_stored == 0);
    for (int i = 0; i < want; ++i) CHECK_STATUS_OK(big.append({W}, {1}));
    const kvc_cache_stats filled = kvt::get_stats(big.get());
    CHECK(filled.bytes_used == reserved.bytes_used);
    CHECK(filled.bytes_copied == reserved.bytes_copied);
    CHECK(filled.tokens_stored == static_cast<uint64_t>(want * KVH));
    big.check_against_reference(W);
  }
}

// A paged cache whose policy keeps per-token statistics takes blocks and statistics arrays for
// one growth. Found by fuzz_api (tests/fuzz/corpus/fuzz_api/reserve_blocks_fit_stats_do_not):
// the blocks were taken first and given back to the free list when the arrays did not fit,
// so the refused call still raised bytes_peak and bytes_reserved.
TEST_CASE("memory limit: a growth whose blocks fit but whose statistics do not changes no stats") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (const std::string call : {"reserve", "append"}) {
    INFO(call);
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = 2;
    p.kv_heads = 2;
    p.head_dim = 1;
    p.dtype = KVC_DTYPE_F32;
    p.block_tokens = 1;
    p.memory_limit = 1024;
    p.policy = "tova";
    p.budget = 2;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    bool refused = false;
    for (int32_t n = 1; n <= 1024 && !refused; ++n) {
      const kvc_cache_stats before = kvt::get_stats(cache.get());
      const std::vector<float> kv(static_cast<size_t>(2 * n), 0.5f);
      std::vector<int32_t> positions(static_cast<size_t>(n));
      for (int32_t t = 0; t < n; ++t) positions[t] = t;
      const int32_t seq = 0;
      kvc_batch batch;
      kvc_batch_init(&batch, 1, &seq, &n, positions.data());
      const kvc_tensor t = kvt::tensor(kv.data(), KVC_DTYPE_F32);
      kvt::Status st{call == "reserve"
                         ? kvc_seq_reserve(cache.get(), 0, n)
                         : kvc_append(cache.get(), 0, &batch, &t, &t)};
      if (st.ok()) {
        if (call == "append") KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), 0, 0));
        continue;
      }
      refused = true;
      INFO(n << " tokens: " << st.describe());
      CHECK(st.code() == KVC_ERR_OUT_OF_MEMORY);
      const kvc_cache_stats after = kvt::get_stats(cache.get());
      INFO("before " << kvt::stats_string(before) << " after " << kvt::stats_string(after));
      CHECK(kvt::stats_equal(before, after));
    }
    CHECK(refused);
  }
}
