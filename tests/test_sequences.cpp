// Sequence operations through the C API: a fork shares K/V blocks and then behaves bit for
// bit like an independent sequence fed the same tokens; truncate and remove-range give the
// attention of a sequence that never held the dropped tokens; errors change nothing.
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "compression_reference.hpp"
#include "test_support.hpp"

namespace {

using kvt::Status;

constexpr int kLayers = 2;
constexpr int kKvHeads = 2;
constexpr int kQHeads = 4;
constexpr int kHeadDim = 16;
constexpr int kBlock = 8;

// One chunk of new tokens of one sequence.
struct Chunk {
  std::vector<float> q, k, v;
  std::vector<int32_t> pos;
};

Chunk random_chunk(std::mt19937& rng, std::vector<int32_t> positions) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Chunk c;
  const size_t n = positions.size();
  c.q.resize(n * kQHeads * kHeadDim);
  c.k.resize(n * kKvHeads * kHeadDim);
  c.v.resize(c.k.size());
  for (float& x : c.q) x = u(rng);
  for (float& x : c.k) x = u(rng);
  for (float& x : c.v) x = u(rng);
  c.pos = std::move(positions);
  return c;
}

std::vector<int32_t> range(int32_t first, int32_t end) {
  std::vector<int32_t> r(static_cast<size_t>(end - first));
  std::iota(r.begin(), r.end(), first);
  return r;
}

// append_attend of a chunk on every layer; the outputs of all layers, concatenated.
std::vector<float> feed(kvc_cache* cache, int32_t seq, const Chunk& c) {
  const int32_t n = static_cast<int32_t>(c.pos.size());
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, c.pos.data());
  std::vector<float> all;
  for (int layer = 0; layer < kLayers; ++layer) {
    std::vector<float> out(c.q.size());
    kvc_tensor q = kvt::tensor(c.q.data(), KVC_DTYPE_F32);
    kvc_tensor k = kvt::tensor(c.k.data(), KVC_DTYPE_F32);
    kvc_tensor v = kvt::tensor(c.v.data(), KVC_DTYPE_F32);
    kvc_tensor_mut o = kvt::tensor_mut(out.data());
    Status s(kvc_append_attend(cache, layer, &batch, &q, &k, &v, nullptr, &o));
    REQUIRE_MESSAGE(s.ok(), s.describe());
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

// Everything stored for one sequence: positions, K and V bytes of every (layer, head).
std::vector<unsigned char> stored(const kvc_cache* cache, int32_t seq, kvc_dtype dtype) {
  const size_t row = kHeadDim * kvc_dtype_size(dtype);
  std::vector<unsigned char> bytes;
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      size_t count = 0;
      KVT_CHECK_OK(kvc_seq_view(cache, seq, layer, h, nullptr, 0, &count));
      std::vector<kvc_segment_view> views(count);
      KVT_CHECK_OK(kvc_seq_view(cache, seq, layer, h, views.data(), views.size(), &count));
      for (const kvc_segment_view& view : views) {
        const auto* pos = reinterpret_cast<const unsigned char*>(view.pos);
        const auto* k = static_cast<const unsigned char*>(view.k);
        const auto* v = static_cast<const unsigned char*>(view.v);
        const size_t n = static_cast<size_t>(view.count);
        bytes.insert(bytes.end(), pos, pos + n * sizeof(int32_t));
        bytes.insert(bytes.end(), k, k + n * row);
        bytes.insert(bytes.end(), v, v + n * row);
      }
    }
  }
  return bytes;
}

kvc_cache_params params(kvc_layout layout, const char* policy) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = KVC_DTYPE_F16;
  p.layout = layout;
  p.block_tokens = kBlock;
  p.memory_limit = size_t{64} << 20;
  if (policy) {
    p.policy = policy;
    p.budget = 24;
  }
  return p;
}

void compress(kvc_cache* cache, int32_t seq) { KVT_CHECK_OK(kvc_compress(cache, -1, 1, &seq)); }

}  // namespace

TEST_CASE("sequences: a fork behaves bit for bit like an independent sequence, sharing blocks") {
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    CAPTURE(layout);
    kvt::ContextPtr ctx = kvt::make_context();
    const kvc_cache_params p = params(layout, "h2o");
    kvt::CachePtr forked = kvt::make_cache(ctx.get(), p);
    kvt::CachePtr separate = kvt::make_cache(ctx.get(), p);
    std::mt19937 rng(7);
    const Chunk prompt = random_chunk(rng, range(0, 20));
    for (int32_t s : {0, 1}) REQUIRE(kvc_seq_create(separate.get(), s) == nullptr);
    REQUIRE(kvc_seq_create(forked.get(), 0) == nullptr);
    feed(forked.get(), 0, prompt);
    const kvc_cache_stats before_fork = kvt::get_stats(forked.get());
    KVT_CHECK_OK(kvc_seq_fork(forked.get(), 0, 1));
    for (int32_t s : {0, 1}) feed(separate.get(), s, prompt);

    const kvc_cache_stats after_fork = kvt::get_stats(forked.get());
    CHECK(after_fork.sequences == 2);
    CHECK(after_fork.tokens_stored == 2 * before_fork.tokens_stored);
    CHECK(after_fork.bytes_shared > 0);
    // Only the branch's statistics were copied; the K/V blocks count once.
    CHECK(after_fork.bytes_used - before_fork.bytes_used < after_fork.bytes_shared);
    CHECK(stored(forked.get(), 1, p.dtype) == stored(forked.get(), 0, p.dtype));

    // Divergent decode steps, and compression on both branches in between.
    for (int step = 0; step < 24; ++step) {
      for (int32_t s : {0, 1}) {
        const Chunk token = random_chunk(rng, {20 + step});
        CHECK(feed(forked.get(), s, token) == feed(separate.get(), s, token));
      }
      if (step == 9 || step == 19) {
        for (int32_t s : {0, 1}) {
          compress(forked.get(), s);
          compress(separate.get(), s);
        }
      }
    }
    for (int32_t s : {0, 1}) CHECK(stored(forked.get(), s, p.dtype) == stored(separate.get(), s, p.dtype));
    // The shared blocks once plus the divergent ones.
    const kvc_cache_stats a = kvt::get_stats(forked.get());
    const kvc_cache_stats b = kvt::get_stats(separate.get());
    CHECK(a.bytes_used + a.bytes_shared == b.bytes_used);
    CHECK(a.tokens_stored == b.tokens_stored);
    CHECK(a.tokens_evicted == b.tokens_evicted);

    // Removing the source leaves the fork intact and the shared blocks unshared.
    KVT_CHECK_OK(kvc_seq_remove(forked.get(), 0));
    KVT_CHECK_OK(kvc_seq_remove(separate.get(), 0));
    CHECK(kvt::get_stats(forked.get()).bytes_shared == 0);
    CHECK(kvt::get_stats(forked.get()).bytes_used == kvt::get_stats(separate.get()).bytes_used);
    const Chunk last = random_chunk(rng, {44});
    CHECK(feed(forked.get(), 1, last) == feed(separate.get(), 1, last));
  }
}

TEST_CASE("sequences: each branch's statistics are its own (kvc_report_stats)") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = params(KVC_LAYOUT_PAGED, "h2o");
  p.budget = 4;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(3);
  feed(cache.get(), 0, random_chunk(rng, range(0, 12)));
  KVT_CHECK_OK(kvc_seq_fork(cache.get(), 0, 1));
  // Branch 0 is told its oldest tokens matter most, branch 1 its newest.
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      std::vector<float> early(12, 0.0f), late(12, 0.0f);
      for (int i = 0; i < 12; ++i) {
        early[static_cast<size_t>(i)] = 100.0f * static_cast<float>(12 - i);
        late[static_cast<size_t>(i)] = 100.0f * static_cast<float>(i);
      }
      KVT_CHECK_OK(kvc_report_stats(cache.get(), 0, layer, h, KVC_STAT_KIND_ATTN_SUM, early.data(), 12));
      KVT_CHECK_OK(kvc_report_stats(cache.get(), 1, layer, h, KVC_STAT_KIND_ATTN_SUM, late.data(), 12));
    }
  }
  compress(cache.get(), 0);
  compress(cache.get(), 1);
  // h2o keeps half its budget as heavy hitters and half as the most recent tokens.
  CHECK(cref::stored_positions(cache.get(), 0, 1, 1) == std::vector<int32_t>{0, 1, 10, 11});
  CHECK(cref::stored_positions(cache.get(), 1, 1, 1) == std::vector<int32_t>{8, 9, 10, 11});
}

TEST_CASE("sequences: truncate and remove-range equal a sequence that never held the tokens") {
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    for (bool fork_first : {false, true}) {
      CAPTURE(layout);
      CAPTURE(fork_first);
      kvt::ContextPtr ctx = kvt::make_context();
      const kvc_cache_params p = params(layout, "h2o");
      kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
      kvt::CachePtr fresh = kvt::make_cache(ctx.get(), p);
      std::mt19937 rng(11);
      const Chunk all = random_chunk(rng, range(0, 30));
      // Rows [first, end) of a chunk, as a chunk.
      auto rows = [&](int32_t first, int32_t end) {
        Chunk c;
        const size_t q_row = kQHeads * kHeadDim, kv_row = kKvHeads * kHeadDim;
        c.q.assign(all.q.begin() + first * q_row, all.q.begin() + end * q_row);
        c.k.assign(all.k.begin() + first * kv_row, all.k.begin() + end * kv_row);
        c.v.assign(all.v.begin() + first * kv_row, all.v.begin() + end * kv_row);
        c.pos.assign(all.pos.begin() + first, all.pos.begin() + end);
        return c;
      };
      const int32_t seq = fork_first ? 1 : 0;
      REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
      feed(cache.get(), 0, all);
      if (fork_first) KVT_CHECK_OK(kvc_seq_fork(cache.get(), 0, 1));
      const std::vector<unsigned char> source_before = stored(cache.get(), 0, p.dtype);

      SUBCASE("truncate at 20") {
        const uint64_t stored_before = kvt::get_stats(cache.get()).tokens_stored;
        KVT_CHECK_OK(kvc_seq_truncate(cache.get(), seq, 20));
        CHECK(kvt::get_stats(cache.get()).tokens_stored == stored_before - 10 * kLayers * kKvHeads);
        REQUIRE(kvc_seq_create(fresh.get(), seq) == nullptr);
        feed(fresh.get(), seq, rows(0, 20));
        const Chunk next = random_chunk(rng, range(20, 25));
        CHECK(feed(cache.get(), seq, next) == feed(fresh.get(), seq, next));
      }
      SUBCASE("remove [10, 20)") {
        KVT_CHECK_OK(kvc_seq_remove_range(cache.get(), seq, 10, 20));
        CHECK(cref::stored_positions(cache.get(), seq, 0, 0).size() == 20);
        REQUIRE(kvc_seq_create(fresh.get(), seq) == nullptr);
        feed(fresh.get(), seq, rows(0, 10));
        feed(fresh.get(), seq, rows(20, 30));
        CHECK(stored(cache.get(), seq, p.dtype) == stored(fresh.get(), seq, p.dtype));
        const Chunk next = random_chunk(rng, range(30, 35));
        CHECK(feed(cache.get(), seq, next) == feed(fresh.get(), seq, next));
      }
      // A fork's source is untouched by what the fork drops.
      if (fork_first) CHECK(stored(cache.get(), 0, p.dtype) == source_before);
    }
  }
}

TEST_CASE("sequences: truncating a paged sequence returns its emptied blocks") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(KVC_LAYOUT_PAGED, nullptr));
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(5);
  feed(cache.get(), 0, random_chunk(rng, range(0, 4 * kBlock)));
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  KVT_CHECK_OK(kvc_seq_truncate(cache.get(), 0, kBlock + 1));
  const kvc_cache_stats after = kvt::get_stats(cache.get());
  CHECK(after.blocks_used == before.blocks_used / 2);
  CHECK(after.bytes_used == before.bytes_used / 2);
  CHECK(kvt::seq_length(cache.get(), 0, 1, 1) == kBlock + 1);
  KVT_CHECK_OK(kvc_seq_truncate(cache.get(), 0, 0));
  CHECK(kvt::get_stats(cache.get()).bytes_used == 0);
}

TEST_CASE("sequences: failed sequence operations change nothing") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = params(KVC_LAYOUT_PAGED, "h2o");
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  REQUIRE(kvc_seq_create(cache.get(), 2) == nullptr);
  std::mt19937 rng(9);
  feed(cache.get(), 0, random_chunk(rng, range(0, 12)));
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  const std::vector<unsigned char> data = stored(cache.get(), 0, p.dtype);
  auto unchanged = [&] {
    CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
    CHECK(stored(cache.get(), 0, p.dtype) == data);
  };
  KVT_CHECK_ERR(kvc_seq_fork(cache.get(), 0, 2), KVC_ERR_ALREADY_EXISTS);
  unchanged();
  KVT_CHECK_ERR(kvc_seq_fork(cache.get(), 5, 6), KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_seq_fork(cache.get(), 0, -1), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_fork(nullptr, 0, 1), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_truncate(cache.get(), 0, -1), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_truncate(cache.get(), 7, 0), KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_seq_remove_range(cache.get(), 0, 5, 4), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_remove_range(cache.get(), 0, -2, 4), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_remove_range(nullptr, 0, 0, 4), KVC_ERR_INVALID_ARGUMENT);
  unchanged();
}

TEST_CASE("sequences: copying a shared block past the memory limit is OUT_OF_MEMORY, changing nothing") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = params(KVC_LAYOUT_PAGED, nullptr);
  // Two blocks per (layer, head): the prompt's, and room for exactly one copy of each.
  const size_t block_bytes = kBlock * (2 * kHeadDim * 2 + sizeof(int32_t));
  p.memory_limit = block_bytes * kLayers * kKvHeads * 2 - 1;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(2);
  feed(cache.get(), 0, random_chunk(rng, range(0, 4)));
  KVT_CHECK_OK(kvc_seq_fork(cache.get(), 0, 1));
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  CHECK(before.bytes_shared == before.bytes_used);
  const std::vector<unsigned char> data = stored(cache.get(), 1, p.dtype);
  // Appending to the fork copies each (layer, head)'s shared partly filled block first: layer
  // 0's two copies fit, layer 1's do not.
  const Chunk token = random_chunk(rng, {4});
  const int32_t seq = 1, n = 1;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, token.pos.data());
  kvc_tensor k = kvt::tensor(token.k.data(), KVC_DTYPE_F32);
  KVT_CHECK_OK(kvc_append(cache.get(), 0, &batch, &k, &k));
  const kvc_cache_stats mid = kvt::get_stats(cache.get());
  CHECK(mid.bytes_shared == before.bytes_shared / 2);
  const std::vector<unsigned char> mid_data = stored(cache.get(), 1, p.dtype);
  KVT_CHECK_ERR(kvc_append(cache.get(), 1, &batch, &k, &k), KVC_ERR_OUT_OF_MEMORY);
  CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), mid));
  CHECK(stored(cache.get(), 1, p.dtype) == mid_data);
  CHECK(stored(cache.get(), 0, p.dtype) == data);
}
