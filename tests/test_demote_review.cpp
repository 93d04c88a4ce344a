// Review of demote before evict (policy.demote), through the C API: counters and heads after
// a failed append whose "once" compression rewrote them, the peak estimate against the real
// peak, heads whose every token is demoted, statistics and rows following their tokens through
// rewrites, version-5 images in caches of other blocks, random operations against exact block
// counts, forks (bytes_shared, copy-on-write), masked and windowed queries over both tiers,
// truncation at the memory limit, batches of mixed and new sequences, and threads.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "demote_support.hpp"
#include "host_reads.hpp"
#include "kvcache/kvcache_format.h"
#include "test_support.hpp"

namespace {

using dmt::arm_fault;
using dmt::exported;
using dmt::random_rows;

constexpr int32_t kKvHeads = 2, kQHeads = 4, kDim = 64;
constexpr int kFaultAppend = 1;  // the fault backend's entry number of append

kvc_cache_params review_params(const char* policy, int32_t budget, int32_t sinks, int32_t recent,
                               double keep) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 2;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kDim;
  p.dtype = KVC_DTYPE_F16;
  p.policy = policy;
  p.budget = budget;
  p.sinks = sinks;
  p.recent = recent;
  p.demote_k_dtype = KVC_DTYPE_Q4_0;
  p.demote_v_dtype = KVC_DTYPE_Q4_0;
  p.demote_keep = keep;
  return p;
}

// Appends positions [first, first + n) of `seq` on `layer`, attending over them when `attend`.
kvt::Status step(kvc_cache* cache, int32_t layer, int32_t seq, int32_t first, int32_t n,
                 std::mt19937& rng, bool attend, std::vector<float>* out = nullptr) {
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) positions[size_t(t)] = first + t;
  const size_t width = size_t(kKvHeads) * kDim;
  const std::vector<float> k = random_rows(rng, size_t(n) * width);
  const std::vector<float> v = random_rows(rng, size_t(n) * width);
  const std::vector<float> q = random_rows(rng, size_t(n) * kQHeads * kDim);
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, positions.data());
  const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
  const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
  if (!attend) return kvt::Status{kvc_append(cache, layer, &batch, &kt, &vt)};
  std::vector<float> local;
  std::vector<float>& o = out ? *out : local;
  o.assign(q.size(), NAN);
  const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
  kvc_tensor_mut ot = kvt::tensor_mut(o.data());
  return kvt::Status{kvc_append_attend(cache, layer, &batch, &qt, &kt, &vt, nullptr, &ot)};
}

bool all_finite(const std::vector<float>& values) {
  for (float x : values) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("demote_review: a failed append puts back tokens_demoted of its once compression") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_FAULT_PLUGIN));
  arm_fault(-1, 0);
  kvc_cache_params p = review_params("window", 40, 4, 8, 0.5);
  p.layers = 1;
  p.backend = "fault";
  p.prefill = KVC_PREFILL_ONCE;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  std::mt19937 rng(1);
  // A prompt attended over, then its first decode token compresses it (prefill once).
  KVT_REQUIRE_OK(step(cache.get(), 0, 0, 0, 100, rng, true));
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  REQUIRE(before.tokens_demoted == 0);
  const std::vector<unsigned char> image = exported(cache.get(), 0);
  // The first decode token compresses the prompt (demoting tokens), then its store fails.
  arm_fault(kFaultAppend, 1);
  kvt::Status failed = step(cache.get(), 0, 0, 100, 1, rng, false);
  arm_fault(-1, 0);
  REQUIRE(failed.code() == KVC_ERR_PLUGIN);
  CHECK(kvt::seq_length(cache.get(), 0, 0, 0) == 100);
  CHECK(exported(cache.get(), 0) == image);
  const kvc_cache_stats after = kvt::get_stats(cache.get());
  CHECK(after.tokens_stored == before.tokens_stored);
  CHECK(after.tokens_evicted == before.tokens_evicted);
  CHECK(after.tokens_demoted == before.tokens_demoted);
  // The retried step demotes again, counted once.
  KVT_REQUIRE_OK(step(cache.get(), 0, 0, 100, 1, rng, false));
  const kvc_cache_stats done = kvt::get_stats(cache.get());
  INFO(kvt::stats_string(done));
  CHECK(done.tokens_demoted > 0);
  CHECK(done.tokens_demoted + done.tokens_evicted + done.tokens_stored >= 2 * 101);
}

TEST_CASE("demote_review: the peak estimate bounds the real peak of a demoting cache") {
  kvt::ContextPtr ctx = kvt::make_context();
  struct Mode {
    const char* name;
    kvc_prefill_compression prefill;
    int32_t decode_every;
    int32_t decode_slack;
  };
  const Mode modes[] = {{"per_chunk", KVC_PREFILL_PER_CHUNK, 0, 0},
                        {"once", KVC_PREFILL_ONCE, 0, 0},
                        {"per_chunk+decode_every", KVC_PREFILL_PER_CHUNK, 8, 0},
                        {"decode_every", KVC_PREFILL_NONE, 4, 0},
                        {"decode_slack", KVC_PREFILL_NONE, 0, 5}};
  for (const char* policy : {"window", "h2o", "tova"}) {
    for (const Mode& mode : modes) {
      for (double keep : {0.0, 0.3, 1.0}) {
        for (int32_t chunk : {7, 32, 100}) {
          const std::string policy_name = policy, mode_name = mode.name;
          CAPTURE(policy_name);
          CAPTURE(mode_name);
          CAPTURE(keep);
          CAPTURE(chunk);
          kvc_cache_params p = review_params(policy, 40, 4, 8, keep);
          p.prefill = mode.prefill;
          p.decode_every = mode.decode_every;
          p.decode_slack = mode.decode_slack;
          kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
          const int32_t prompt = 150, decode = 60;
          size_t estimate = 0;
          KVT_REQUIRE_OK(kvc_cache_estimate_peak_bytes(cache.get(), prompt, chunk, decode, &estimate));
          KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
          std::mt19937 rng(4);
          for (int32_t first = 0; first < prompt; first += chunk) {
            const int32_t n = std::min(chunk, prompt - first);
            for (int32_t layer = 0; layer < p.layers; ++layer) {
              KVT_REQUIRE_OK(step(cache.get(), layer, 0, first, n, rng, true));
            }
          }
          for (int32_t t = 0; t < decode; ++t) {
            for (int32_t layer = 0; layer < p.layers; ++layer) {
              KVT_REQUIRE_OK(step(cache.get(), layer, 0, prompt + t, 1, rng, true));
            }
          }
          const kvc_cache_stats stats = kvt::get_stats(cache.get());
          INFO(kvt::stats_string(stats));
          CHECK(stats.bytes_peak <= estimate);
        }
      }
    }
  }
}

TEST_CASE("demote_review: heads with every token demoted append, fork and attend") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (const char* policy : {"window", "h2o"}) {
    const std::string policy_name = policy;
    CAPTURE(policy_name);
    kvc_cache_params p = review_params(policy, 20, 0, 0, 0.0);
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    std::mt19937 rng(6);
    for (int32_t layer = 0; layer < p.layers; ++layer) {
      KVT_REQUIRE_OK(step(cache.get(), layer, 0, 0, 50, rng, true));
    }
    const int32_t seq = 0;
    KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
    kvc_cache_stats stats = kvt::get_stats(cache.get());
    // keep 0: no token stays in f16, so every stored token is a demoted one.
    CHECK(stats.tokens_demoted == stats.tokens_stored);
    CHECK(stats.tokens_stored + stats.tokens_evicted == 2u * 2u * 50u);
    CHECK(stats.tokens_stored > 2u * 2u * 20u);
    const int32_t held = kvt::seq_length(cache.get(), 0, 0, 0);
    KVT_REQUIRE_OK(kvc_seq_fork(cache.get(), 0, 1));
    // Both sides append past a block and attend over the demoted tier then the new f16 one.
    for (int32_t s : {0, 1}) {
      for (int32_t t = 0; t < 20; ++t) {
        for (int32_t layer = 0; layer < p.layers; ++layer) {
          std::vector<float> out;
          KVT_REQUIRE_OK(step(cache.get(), layer, s, 50 + t, 1, rng, true, &out));
          CHECK(all_finite(out));
        }
      }
      CHECK(kvt::seq_length(cache.get(), s, 0, 0) == held + 20);
    }
    stats = kvt::get_stats(cache.get());
    size_t lengths = 0;
    for (int32_t s = 0; s < 2; ++s) {
      for (int32_t layer = 0; layer < p.layers; ++layer) {
        for (int32_t h = 0; h < kKvHeads; ++h) lengths += size_t(kvt::seq_length(cache.get(), s, layer, h));
      }
    }
    CHECK(stats.tokens_stored == lengths);
    // Removing the whole demoted tier leaves the f16 tokens, which still append.
    KVT_REQUIRE_OK(kvc_seq_remove_range(cache.get(), 1, 0, 50));
    CHECK(kvt::seq_length(cache.get(), 1, 0, 0) == 20);
    for (int32_t layer = 0; layer < p.layers; ++layer) {
      std::vector<float> out;
      KVT_REQUIRE_OK(step(cache.get(), layer, 1, 70, 1, rng, true, &out));
      CHECK(all_finite(out));
    }
    // Truncating into the demoted tier of the other side.
    KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), 0, 10));
    const int32_t left = kvt::seq_length(cache.get(), 0, 0, 0);
    CHECK(left == 10);
    for (int32_t layer = 0; layer < p.layers; ++layer) {
      std::vector<float> out;
      KVT_REQUIRE_OK(step(cache.get(), layer, 0, 10, 17, rng, true, &out));
      CHECK(all_finite(out));
    }
    CHECK(kvt::seq_length(cache.get(), 0, 0, 0) == left + 17);
  }
}

TEST_CASE("demote_review: compressions of disjoint sequences on threads match one by one") {
  kvt::ContextPtr ctx = kvt::make_context();
  constexpr int32_t kSeqs = 4;
  auto run = [&](kvc_cache* cache, int32_t seq) {
    std::mt19937 rng(static_cast<unsigned>(100 + seq));
    for (int32_t first = 0; first < 120; first += 24) {
      for (int32_t layer = 0; layer < 2; ++layer) {
        if (step(cache, layer, seq, first, 24, rng, true).code() != KVC_OK) return false;
      }
    }
    for (int32_t t = 0; t < 20; ++t) {
      for (int32_t layer = 0; layer < 2; ++layer) {
        if (step(cache, layer, seq, 120 + t, 1, rng, true).code() != KVC_OK) return false;
      }
    }
    return true;
  };
  kvc_cache_params p = review_params("h2o", 30, 2, 4, 0.4);
  p.prefill = KVC_PREFILL_PER_CHUNK;
  p.decode_every = 3;
  kvt::CachePtr serial = kvt::make_cache(ctx.get(), p);
  kvt::CachePtr parallel = kvt::make_cache(ctx.get(), p);
  for (int32_t s = 0; s < kSeqs; ++s) {
    KVT_REQUIRE_OK(kvc_seq_create(serial.get(), s));
    KVT_REQUIRE_OK(kvc_seq_create(parallel.get(), s));
    CHECK(run(serial.get(), s));
  }
  std::vector<std::thread> threads;
  std::vector<char> ok(kSeqs, 0);
  for (int32_t s = 0; s < kSeqs; ++s) {
    threads.emplace_back([&, s] { ok[size_t(s)] = run(parallel.get(), s) ? 1 : 0; });
  }
  for (std::thread& t : threads) t.join();
  for (int32_t s = 0; s < kSeqs; ++s) {
    CHECK(ok[size_t(s)] == 1);
    CHECK(exported(serial.get(), s) == exported(parallel.get(), s));
  }
  const kvc_cache_stats a = kvt::get_stats(serial.get()), b = kvt::get_stats(parallel.get());
  CHECK(a.tokens_demoted == b.tokens_demoted);
  CHECK(a.tokens_stored == b.tokens_stored);
  CHECK(a.bytes_used == b.bytes_used);
  CHECK(a.tokens_demoted > 0);
}

namespace {

// Per head of `seq`: position -> (statistics, K row bytes, V row bytes, demoted).
struct StoredToken {
  float stats[3];
  std::vector<uint8_t> k, v;
  bool demoted;
};
using StoredHeads = std::vector<std::vector<std::pair<int32_t, StoredToken>>>;

StoredHeads stored_tokens(kvc_cache* cache, int32_t seq) {
  const kvc::SequenceImage image = kvt::stored_sequence(cache, seq);
  StoredHeads out;
  for (const kvc::HeadImage& head : image.heads) {
    out.emplace_back();
    size_t k_at = 0, v_at = 0;
    const size_t k_row = kvc_format_row_bytes(KVC_DTYPE_F16, kDim);
    const size_t k_demoted = kvc_format_row_bytes(KVC_DTYPE_Q4_0, kDim);
    for (size_t t = 0; t < head.positions.size(); ++t) {
      StoredToken token{};
      token.demoted = static_cast<int32_t>(t) < head.demoted;
      const size_t bytes = token.demoted ? k_demoted : k_row;
      token.k.assign(head.k_rows() + k_at, head.k_rows() + k_at + bytes);
      token.v.assign(head.v_rows() + v_at, head.v_rows() + v_at + bytes);
      k_at += bytes;
      v_at += bytes;
      for (size_t s = 0; s < 3; ++s) token.stats[s] = head.stats[s].empty() ? 0.0f : head.stats[s][t];
      out.back().emplace_back(head.positions[t], std::move(token));
    }
  }
  return out;
}

// Every token `after` holds was in `before` with the same statistics, and with the same rows
// unless it was demoted in between.
void check_followed(const StoredHeads& before, const StoredHeads& after) {
  REQUIRE(before.size() == after.size());
  for (size_t h = 0; h < before.size(); ++h) {
    for (const auto& [pos, token] : after[h]) {
      CAPTURE(h);
      CAPTURE(pos);
      const auto found = std::find_if(before[h].begin(), before[h].end(),
                                      [&](const auto& entry) { return entry.first == pos; });
      REQUIRE(found != before[h].end());
      for (size_t s = 0; s < 3; ++s) CHECK(found->second.stats[s] == token.stats[s]);
      if (found->second.demoted == token.demoted) {
        CHECK(found->second.k == token.k);
        CHECK(found->second.v == token.v);
      }
      CHECK((token.demoted || !found->second.demoted));
    }
  }
}

}  // namespace

TEST_CASE("demote_review: statistics and rows follow their tokens through rewrites") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (const char* policy : {"h2o", "tova", "snapkv", "pyramidkv", "adakv"}) {
    const std::string policy_name = policy;
    CAPTURE(policy_name);
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), review_params(policy, 40, 4, 8, 0.4));
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    std::mt19937 rng(8);
    const int32_t seq = 0;
    int32_t next = 0;
    for (int round = 0; round < 3; ++round) {
      for (int32_t layer = 0; layer < 2; ++layer) {
        KVT_REQUIRE_OK(step(cache.get(), layer, 0, next, 30, rng, true));
        for (int32_t t = 0; t < 5; ++t) KVT_REQUIRE_OK(step(cache.get(), layer, 0, next + 30 + t, 1, rng, true));
      }
      next += 35;
      const StoredHeads before = stored_tokens(cache.get(), 0);
      KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
      const StoredHeads after = stored_tokens(cache.get(), 0);
      check_followed(before, after);
    }
    CHECK(kvt::get_stats(cache.get()).tokens_demoted > 0);
    // A removed range in the middle of both tiers keeps the rest as it was.
    const StoredHeads before = stored_tokens(cache.get(), 0);
    KVT_REQUIRE_OK(kvc_seq_remove_range(cache.get(), 0, 20, 90));
    check_followed(before, stored_tokens(cache.get(), 0));
  }
}

TEST_CASE("demote_review: an image with demoted tiers imports into a cache of other blocks") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = review_params("h2o", 40, 4, 8, 0.4);
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  std::mt19937 rng(9);
  for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache.get(), layer, 0, 0, 90, rng, true));
  const int32_t seq = 0;
  KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
  REQUIRE(kvt::get_stats(cache.get()).tokens_demoted > 0);
  const std::vector<unsigned char> image = exported(cache.get(), 0);
  for (int32_t block_tokens : {5, 16, 64}) {
    CAPTURE(block_tokens);
    kvc_cache_params q = p;
    q.block_tokens = block_tokens;
    kvt::CachePtr other = kvt::make_cache(ctx.get(), q);
    KVT_REQUIRE_OK(kvc_seq_import(other.get(), 0, image.data(), image.size()));
    CHECK(exported(other.get(), 0) == image);
    const kvc_cache_stats stats = kvt::get_stats(other.get());
    CHECK(stats.tokens_stored == kvt::get_stats(cache.get()).tokens_stored);
    // Both attend alike over the imported tiers, then append past a block and compress again.
    for (int32_t t = 0; t < 40; ++t) {
      for (int32_t layer = 0; layer < 2; ++layer) {
        std::mt19937 a(unsigned(t * 2 + layer)), b(unsigned(t * 2 + layer));
        std::vector<float> out_a, out_b;
        KVT_REQUIRE_OK(step(cache.get(), layer, 0, 90 + t, 1, a, true, &out_a));
        KVT_REQUIRE_OK(step(other.get(), layer, 0, 90 + t, 1, b, true, &out_b));
        CHECK(out_a == out_b);
      }
    }
    KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
    KVT_REQUIRE_OK(kvc_compress(other.get(), -1, 1, &seq));
    CHECK(kvt::stored_bytes(cache.get(), 0) == kvt::stored_bytes(other.get(), 0));
    // Put the source back as it was for the next block size.
    KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 0));
    KVT_REQUIRE_OK(kvc_seq_import(cache.get(), 0, image.data(), image.size()));
  }
}

namespace {

// Blocks a sequence's heads take, each tier in whole blocks of its own (no block shared).
size_t expected_blocks(kvc_cache* cache, int32_t seq, int32_t block_tokens) {
  const size_t token_f16 = 2 * kvc_format_row_bytes(KVC_DTYPE_F16, kDim) + 4;
  const size_t token_q4 = 2 * kvc_format_row_bytes(KVC_DTYPE_Q4_0, kDim) + 4;
  const size_t demoted_per_block = size_t(block_tokens) * token_f16 / token_q4;
  size_t blocks = 0;
  for (const kvc::HeadImage& head : kvt::stored_sequence(cache, seq).heads) {
    const size_t demoted = size_t(head.demoted), kept = head.positions.size() - demoted;
    blocks += (demoted + demoted_per_block - 1) / demoted_per_block +
              (kept + size_t(block_tokens) - 1) / size_t(block_tokens);
  }
  return blocks;
}

}  // namespace

TEST_CASE("demote_review: random appends, compressions and removals keep the counters exact") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (int32_t block_tokens : {4, 16}) {
    for (double keep : {0.0, 0.5, 1.0}) {
      CAPTURE(block_tokens);
      CAPTURE(keep);
      kvc_cache_params p = review_params("window", 30, 2, 3, keep);
      p.block_tokens = block_tokens;
      kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
      KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
      std::mt19937 rng(static_cast<unsigned>(block_tokens * 10 + keep * 4));
      const int32_t seq = 0;
      int32_t next = 0;
      for (int op = 0; op < 150; ++op) {
        CAPTURE(op);
        const int kind = int(rng() % 5);
        if (kind <= 1) {
          const int32_t n = 1 + int32_t(rng() % 40);
          for (int32_t layer = 0; layer < 2; ++layer) {
            std::vector<float> out;
            KVT_REQUIRE_OK(step(cache.get(), layer, 0, next, n, rng, true, &out));
            CHECK(all_finite(out));
          }
          next += n;
        } else if (kind == 2) {
          KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
        } else if (kind == 3 && next > 0) {
          const int32_t first = int32_t(rng() % uint32_t(next));
          const int32_t end = first + int32_t(rng() % 30);
          KVT_REQUIRE_OK(kvc_seq_remove_range(cache.get(), 0, first, end));
        } else if (next > 0) {
          KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), 0, next - int32_t(rng() % 20)));
        }
        const kvc_cache_stats stats = kvt::get_stats(cache.get());
        size_t lengths = 0;
        for (int32_t layer = 0; layer < 2; ++layer) {
          for (int32_t h = 0; h < kKvHeads; ++h) lengths += size_t(kvt::seq_length(cache.get(), 0, layer, h));
        }
        CHECK(stats.tokens_stored == lengths);
        const size_t blocks = expected_blocks(cache.get(), 0, block_tokens);
        CHECK(stats.blocks_used == blocks);
        CHECK(stats.bytes_used == blocks * size_t(block_tokens) * (2 * kvc_format_row_bytes(KVC_DTYPE_F16, kDim) + 4));
        // An image round trip changes nothing (every tenth step, so that most steps work on
        // heads the cache built itself).
        if (op % 10 != 9) continue;
        const std::vector<unsigned char> image = exported(cache.get(), 0);
        KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 0));
        KVT_REQUIRE_OK(kvc_seq_import(cache.get(), 0, image.data(), image.size()));
        CHECK(exported(cache.get(), 0) == image);
      }
      // keep 1: the whole budget stays in f16 and nothing is demoted.
      CHECK((kvt::get_stats(cache.get()).tokens_demoted > 0) == (keep < 1.0));
    }
  }
}

TEST_CASE("demote_review: a fork of mixed heads leaves its source as a cache that never forked") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (int32_t budget : {30, 5}) {  // 5: less than the sinks and recent tokens protected
    CAPTURE(budget);
    const kvc_cache_params p = review_params("h2o", budget, 4, 8, 0.3);
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    kvt::CachePtr twin = kvt::make_cache(ctx.get(), p);
    const int32_t seq = 0;
    for (kvc_cache* c : {cache.get(), twin.get()}) {
      KVT_REQUIRE_OK(kvc_seq_create(c, 0));
      std::mt19937 rng(12);
      for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(c, layer, 0, 0, 77, rng, true));
      KVT_REQUIRE_OK(kvc_compress(c, -1, 1, &seq));
    }
    // Budget 5: the protected tokens stay in f16 and take more than the budget, so no
    // other token is left, demoted or not.
    CHECK((kvt::get_stats(cache.get()).tokens_demoted > 0) == (budget == 30));
    if (budget == 5) CHECK(kvt::seq_length(cache.get(), 0, 0, 0) == 12);
    KVT_REQUIRE_OK(kvc_seq_fork(cache.get(), 0, 1));
    // Every block the source holds is shared now, a demoted tier's blocks too, each counting
    // a whole block as it does in bytes_used (which also holds the statistics arrays).
    const kvc_cache_stats forked = kvt::get_stats(cache.get());
    const size_t block_bytes = 16 * (2 * kvc_format_row_bytes(KVC_DTYPE_F16, kDim) + 4);
    CHECK(forked.bytes_shared == forked.blocks_used * block_bytes);
    // The fork appends into the shared open block, compresses and removes; then both sides
    // append the same tokens as the twin's sequence.
    std::mt19937 fork_rng(13);
    for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache.get(), layer, 1, 77, 9, fork_rng, true));
    const int32_t fork = 1;
    KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &fork));
    KVT_REQUIRE_OK(kvc_seq_remove_range(cache.get(), 1, 10, 40));
    CHECK(exported(cache.get(), 0) == exported(twin.get(), 0));
    for (kvc_cache* c : {cache.get(), twin.get()}) {
      std::mt19937 rng(14);
      for (int32_t t = 0; t < 30; ++t) {
        for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(c, layer, 0, 77 + t, 1, rng, true));
      }
      KVT_REQUIRE_OK(kvc_compress(c, -1, 1, &seq));
    }
    CHECK(exported(cache.get(), 0) == exported(twin.get(), 0));
    KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 1));
    const kvc_cache_stats a = kvt::get_stats(cache.get()), b = kvt::get_stats(twin.get());
    CHECK(a.blocks_used == b.blocks_used);
    CHECK(a.bytes_used == b.bytes_used);
    CHECK(a.tokens_stored == b.tokens_stored);
    CHECK(a.bytes_shared == 0);
  }
}

namespace {

std::vector<float> decoded(int format, const uint8_t* row) {
  std::vector<float> out(kDim);
  REQUIRE(kvc_format_row_to_f32(format, row, out.data(), kDim));
  return out;
}

std::vector<float> rounded(int format, const std::vector<float>& values) {
  std::vector<unsigned char> row(kvc_format_row_bytes(format, values.size()));
  std::vector<float> out(values.size());
  REQUIRE(kvc_format_row_from_f32(format, values.data(), row.data(), values.size()));
  REQUIRE(kvc_format_row_to_f32(format, row.data(), out.data(), values.size()));
  return out;
}

// Attention in double of one query token at `q_pos` over what the sequence stores (its image),
// keys within the sliding window (0: none); demoted (q4_0) keys meet the scaled query rounded
// to q4_0's query format, f16 ones the exact query.
std::vector<double> image_attention(kvc_cache* cache, int32_t seq, int32_t layer,
                                    const std::vector<float>& q, int32_t q_pos, int32_t window) {
  const kvc::SequenceImage image = kvt::stored_sequence(cache, seq);
  const double scale = 1.0 / std::sqrt(double(kDim));
  std::vector<double> out(q.size(), 0.0);
  for (int32_t qh = 0; qh < kQHeads; ++qh) {
    const kvc::HeadImage& head =
        image.heads[size_t(layer * kKvHeads + qh / (kQHeads / kKvHeads))];
    const std::vector<float> exact(q.begin() + qh * kDim, q.begin() + (qh + 1) * kDim);
    std::vector<float> scaled(exact);
    for (float& x : scaled) x *= float(scale);
    const std::vector<float> query_q4 = rounded(kvc_format_query_format(KVC_DTYPE_Q4_0), scaled);
    std::vector<double> logits;
    std::vector<std::vector<float>> values;
    double top = -INFINITY;
    size_t k_at = 0;
    for (size_t t = 0; t < head.positions.size(); ++t) {
      const bool demoted = int32_t(t) < head.demoted;
      const int format = demoted ? KVC_DTYPE_Q4_0 : KVC_DTYPE_F16;
      const std::vector<float> k = decoded(format, head.k_rows() + k_at);
      values.push_back(decoded(format, head.v_rows() + k_at));
      k_at += kvc_format_row_bytes(format, kDim);
      double dot = 0.0;
      for (int32_t i = 0; i < kDim; ++i) {
        dot += demoted ? double(query_q4[size_t(i)]) * k[size_t(i)]
                       : double(exact[size_t(i)]) * k[size_t(i)] * scale;
      }
      const int32_t p = head.positions[t];
      const bool seen = p <= q_pos && (window <= 0 || p > q_pos - window);
      logits.push_back(seen ? dot : -INFINITY);
      top = std::max(top, logits.back());
    }
    double sum = 0.0;
    for (size_t j = 0; j < logits.size(); ++j) {
      const double w = std::exp(logits[j] - top);
      sum += w;
      for (int32_t i = 0; i < kDim; ++i) out[size_t(qh * kDim + i)] += w * values[j][size_t(i)];
    }
    // A query that sees no key gets zeros.
    for (int32_t i = 0; i < kDim; ++i) out[size_t(qh * kDim + i)] = top == -INFINITY ? 0.0 : out[size_t(qh * kDim + i)] / sum;
  }
  return out;
}

}  // namespace

TEST_CASE("demote_review: queries at older positions and sliding windows over mixed heads") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (int32_t block_tokens : {16, 5}) {
    CAPTURE(block_tokens);
    kvc_cache_params p = review_params("window", 40, 4, 8, 0.5);
    p.block_tokens = block_tokens;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    std::mt19937 rng(15);
    for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache.get(), layer, 0, 0, 150, rng, false));
    const int32_t seq = 0;
    KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
    // A few f16 tokens after the kept ones: a demoted tier, then f16 blocks, the last partly
    // filled.
    for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache.get(), layer, 0, 150, 3, rng, false));
    REQUIRE(kvt::get_stats(cache.get()).tokens_demoted > 0);
    for (int32_t q_pos : {152, 151, 145, 100, 60, 3, 0}) {
      for (int32_t window : {0, 1, 7, 60}) {
        CAPTURE(q_pos);
        CAPTURE(window);
        const std::vector<float> q = random_rows(rng, size_t(kQHeads) * kDim);
        std::vector<float> out(q.size(), NAN);
        const int32_t n = 1;
        kvc_batch batch;
        kvc_batch_init(&batch, 1, &seq, &n, &q_pos);
        kvc_attention_params params;
        kvc_attention_params_init(&params);
        params.sliding_window = window;
        const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
        kvc_tensor_mut ot = kvt::tensor_mut(out.data());
        KVT_REQUIRE_OK(kvc_attend(cache.get(), 1, &batch, &qt, &params, &ot));
        const std::vector<double> expected = image_attention(cache.get(), 0, 1, q, q_pos, window);
        double worst = 0.0;
        for (size_t i = 0; i < out.size(); ++i) {
          worst = std::max(worst, std::isnan(out[i]) ? INFINITY : std::fabs(double(out[i]) - expected[i]));
        }
        CHECK(worst < 1e-4);
      }
    }
  }
}

TEST_CASE("demote_review: truncation at the memory limit frees memory in a demoting cache") {
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t block_bytes = 16 * (2 * kvc_format_row_bytes(KVC_DTYPE_F16, kDim) + 4);
  for (bool demoting : {false, true}) {
    CAPTURE(demoting);
    kvc_cache_params p = review_params("window", 40, 4, 8, 0.5);
    p.layers = 1;
    if (!demoting) p.demote_k_dtype = p.demote_v_dtype = -1;
    p.memory_limit = 7 * kKvHeads * block_bytes;  // 100 tokens fill 7 blocks a head
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    std::mt19937 rng(16);
    KVT_REQUIRE_OK(step(cache.get(), 0, 0, 0, 100, rng, false));
    REQUIRE(kvt::get_stats(cache.get()).bytes_used == p.memory_limit);
    // Rejected speculative tokens rolled back: no head holds a demoted token yet.
    KVT_CHECK_OK(kvc_seq_truncate(cache.get(), 0, 98));
    CHECK(kvt::seq_length(cache.get(), 0, 0, 0) == 98);
    KVT_CHECK_OK(kvc_seq_remove_range(cache.get(), 0, 90, 95));
    CHECK(kvt::seq_length(cache.get(), 0, 0, 0) == 93);
    CHECK(kvt::get_stats(cache.get()).bytes_used <= p.memory_limit);
  }
}

TEST_CASE("demote_review: a failed append puts back mixed heads its once compression rewrote") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_FAULT_PLUGIN));
  arm_fault(-1, 0);
  kvc_cache_params p = review_params("h2o", 40, 4, 8, 0.5);
  p.backend = "fault";
  p.prefill = KVC_PREFILL_ONCE;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  std::mt19937 rng(17);
  const int32_t seq = 0;
  for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache.get(), layer, 0, 0, 100, rng, true));
  KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));  // mixed heads before the prompt ends
  for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache.get(), layer, 0, 100, 60, rng, true));
  KVT_REQUIRE_OK(kvc_seq_fork(cache.get(), 0, 1));  // some blocks shared while it rewrites
  const std::vector<unsigned char> image = exported(cache.get(), 0);
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  for (int32_t layer = 0; layer < 2; ++layer) {
    CAPTURE(layer);
    arm_fault(kFaultAppend, 1);
    kvt::Status failed = step(cache.get(), layer, 0, 160, 1, rng, true);
    arm_fault(-1, 0);
    REQUIRE(failed.code() == KVC_ERR_PLUGIN);
    CHECK(exported(cache.get(), 0) == image);
    CHECK(exported(cache.get(), 1) == image);
    kvc_cache_stats after = kvt::get_stats(cache.get());
    after.bytes_peak = before.bytes_peak;
    after.bytes_reserved = before.bytes_reserved;
    after.tokens_demoted = before.tokens_demoted;  // the case above checks this one
    CHECK(kvt::stats_equal(after, before));
  }
  for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache.get(), layer, 0, 160, 1, rng, true));
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 1));
  size_t lengths = 0;
  for (int32_t layer = 0; layer < 2; ++layer) {
    for (int32_t h = 0; h < kKvHeads; ++h) {
      const int32_t length = kvt::seq_length(cache.get(), 0, layer, h);
      CHECK(length < 161);  // the retried step compressed the prompt
      lengths += size_t(length);
    }
  }
  CHECK(kvt::get_stats(cache.get()).tokens_stored == lengths);
}

TEST_CASE("demote_review: a batch of a mixed and a new sequence stores as each one alone") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = review_params("snapkv", 30, 2, 4, 0.3);
  p.prefill = KVC_PREFILL_PER_CHUNK;
  p.decode_every = 2;
  // Sequence 0 is compressed to mixed heads first; then both decode in one batch per step.
  auto prefill = [&](kvc_cache* cache, int32_t seq, int32_t n, unsigned seed) {
    std::mt19937 rng(seed);
    for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache, layer, seq, 0, n, rng, true));
  };
  kvt::CachePtr batched = kvt::make_cache(ctx.get(), p);
  kvt::CachePtr alone = kvt::make_cache(ctx.get(), p);
  for (int32_t s : {0, 1}) {
    KVT_REQUIRE_OK(kvc_seq_create(batched.get(), s));
    KVT_REQUIRE_OK(kvc_seq_create(alone.get(), s));
  }
  prefill(batched.get(), 0, 90, 20);
  prefill(alone.get(), 0, 90, 20);
  REQUIRE(kvt::get_stats(batched.get()).tokens_demoted > 0);
  prefill(batched.get(), 1, 20, 21);
  prefill(alone.get(), 1, 20, 21);
  const size_t width = size_t(kKvHeads) * kDim;
  std::mt19937 rng(22);
  for (int32_t t = 0; t < 25; ++t) {
    for (int32_t layer = 0; layer < 2; ++layer) {
      const std::vector<float> k = random_rows(rng, 2 * width), v = random_rows(rng, 2 * width);
      const std::vector<float> q = random_rows(rng, 2 * size_t(kQHeads) * kDim);
      const int32_t ids[2] = {0, 1}, counts[2] = {1, 1}, positions[2] = {90 + t, 20 + t};
      std::vector<float> out_batched(q.size()), out_alone(q.size());
      kvc_batch batch;
      kvc_batch_init(&batch, 2, ids, counts, positions);
      kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32), vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
      kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
      kvc_tensor_mut ot = kvt::tensor_mut(out_batched.data());
      KVT_REQUIRE_OK(kvc_append_attend(batched.get(), layer, &batch, &qt, &kt, &vt, nullptr, &ot));
      for (int32_t s : {0, 1}) {
        kvc_batch one;
        kvc_batch_init(&one, 1, &ids[s], &counts[s], &positions[s]);
        kvc_tensor ks = kvt::tensor(k.data() + size_t(s) * width, KVC_DTYPE_F32);
        kvc_tensor vs = kvt::tensor(v.data() + size_t(s) * width, KVC_DTYPE_F32);
        kvc_tensor qs = kvt::tensor(q.data() + size_t(s) * kQHeads * kDim, KVC_DTYPE_F32);
        kvc_tensor_mut os = kvt::tensor_mut(out_alone.data() + size_t(s) * kQHeads * kDim);
        KVT_REQUIRE_OK(kvc_append_attend(alone.get(), layer, &one, &qs, &ks, &vs, nullptr, &os));
      }
      CHECK(out_batched == out_alone);
    }
  }
  for (int32_t s : {0, 1}) CHECK(exported(batched.get(), s) == exported(alone.get(), s));
  const kvc_cache_stats a = kvt::get_stats(batched.get()), b = kvt::get_stats(alone.get());
  CHECK(a.tokens_demoted == b.tokens_demoted);
  CHECK(a.tokens_evicted == b.tokens_evicted);
  CHECK(a.bytes_used == b.bytes_used);
}

TEST_CASE("demote_review: reserve on mixed heads gives the f16 tier the blocks its appends use") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (double keep : {0.0, 0.5}) {  // 0: the f16 tier is empty after the compression
    CAPTURE(keep);
    kvc_cache_params p = review_params("window", 30, keep == 0.0 ? 0 : 2, keep == 0.0 ? 0 : 3, keep);
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    std::mt19937 rng(23);
    for (int32_t layer = 0; layer < 2; ++layer) KVT_REQUIRE_OK(step(cache.get(), layer, 0, 0, 70, rng, false));
    const int32_t seq = 0;
    KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
    REQUIRE(kvt::get_stats(cache.get()).tokens_demoted > 0);
    const int32_t length = kvt::seq_length(cache.get(), 0, 0, 0);
    KVT_REQUIRE_OK(kvc_seq_reserve(cache.get(), 0, length + 40));
    const kvc_cache_stats reserved = kvt::get_stats(cache.get());
    for (int32_t layer = 0; layer < 2; ++layer) {
      std::vector<float> out;
      KVT_REQUIRE_OK(step(cache.get(), layer, 0, 70, 40, rng, true, &out));
      CHECK(all_finite(out));
    }
    const kvc_cache_stats appended = kvt::get_stats(cache.get());
    CHECK(appended.blocks_used == reserved.blocks_used);
    CHECK(appended.blocks_used == expected_blocks(cache.get(), 0, 16));
    KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
    CHECK(kvt::get_stats(cache.get()).blocks_used == expected_blocks(cache.get(), 0, 16));
  }
}
