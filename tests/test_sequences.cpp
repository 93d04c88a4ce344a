// Sequence operations through the C API: a fork shares K/V blocks and then behaves bit for
// bit like an independent sequence fed the same tokens; truncate and remove-range give the
// attention of a sequence that never held the dropped tokens; export/import round-trips bit
// for bit; errors change nothing.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "host_reads.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_half.h"
#include "reference_attention.hpp"
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

// Whether kvc_append of one token at `position` on `layer` is refused as out of order.
bool refused_at(kvc_cache* cache, int32_t seq, int32_t layer, int32_t position) {
  const int32_t one = 1;
  std::vector<float> kv(kKvHeads * kHeadDim, 0.5f);
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &one, &position);
  const kvc_tensor t = kvt::tensor(kv.data(), KVC_DTYPE_F32);
  const Status s(kvc_append(cache, layer, &batch, &t, &t));
  if (!s.ok()) REQUIRE_MESSAGE(s.code() == KVC_ERR_INVALID_ARGUMENT, s.describe());
  return !s.ok();
}

}  // namespace

// A store goes on after each head's newest stored position, which the core keeps on the host
// (no backend read) and every change of what a head stores moves.
TEST_CASE("sequences: a store goes on after the newest position kept, whatever changed it") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    CAPTURE(layout);
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(layout, nullptr));
    std::mt19937 rng(31);
    REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
    feed(cache.get(), 0, random_chunk(rng, range(0, 20)));
    CHECK(refused_at(cache.get(), 0, 1, 19));
    // Removing a middle range keeps the newest; truncating moves it back.
    KVT_REQUIRE_OK(kvc_seq_remove_range(cache.get(), 0, 5, 10));
    CHECK(refused_at(cache.get(), 0, 1, 19));
    KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), 0, 15));
    CHECK(refused_at(cache.get(), 0, 1, 14));
    feed(cache.get(), 0, random_chunk(rng, range(15, 17)));
    CHECK(refused_at(cache.get(), 0, 0, 16));
    // A fork and an import start from their source's newest.
    KVT_REQUIRE_OK(kvc_seq_fork(cache.get(), 0, 1));
    const std::vector<uint8_t> bytes = kvt::export_bytes(cache.get(), 0);
    KVT_REQUIRE_OK(kvc_seq_import(cache.get(), 2, bytes.data(), bytes.size()));
    for (int32_t seq : {1, 2}) {
      CAPTURE(seq);
      CHECK(refused_at(cache.get(), seq, 1, 16));
      feed(cache.get(), seq, random_chunk(rng, range(17, 18)));
    }
    // One layer on: the other layer follows its own newest.
    CHECK_FALSE(refused_at(cache.get(), 0, 0, 20));
    CHECK(refused_at(cache.get(), 0, 0, 20));
    CHECK_FALSE(refused_at(cache.get(), 0, 1, 17));
    CHECK(kvt::stored_positions(cache.get(), 0, 1, 1) ==
          std::vector<int32_t>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 17});
    // Emptied, a head takes any position again.
    KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), 0, 0));
    CHECK_FALSE(refused_at(cache.get(), 0, 0, 0));
  }
}

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
    CHECK(kvt::stored_bytes(forked.get(), 1) == kvt::stored_bytes(forked.get(), 0));

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
    for (int32_t s : {0, 1}) {
      CHECK(kvt::stored_bytes(forked.get(), s) == kvt::stored_bytes(separate.get(), s));
    }
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
  CHECK(kvt::stored_positions(cache.get(), 0, 1, 1) == std::vector<int32_t>{0, 1, 10, 11});
  CHECK(kvt::stored_positions(cache.get(), 1, 1, 1) == std::vector<int32_t>{8, 9, 10, 11});
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
      const std::vector<unsigned char> source_before = kvt::stored_bytes(cache.get(), 0);

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
        CHECK(kvt::stored_positions(cache.get(), seq, 0, 0).size() == 20);
        REQUIRE(kvc_seq_create(fresh.get(), seq) == nullptr);
        feed(fresh.get(), seq, rows(0, 10));
        feed(fresh.get(), seq, rows(20, 30));
        CHECK(kvt::stored_bytes(cache.get(), seq) == kvt::stored_bytes(fresh.get(), seq));
        const Chunk next = random_chunk(rng, range(30, 35));
        CHECK(feed(cache.get(), seq, next) == feed(fresh.get(), seq, next));
      }
      // A fork's source is untouched by what the fork drops.
      if (fork_first) CHECK(kvt::stored_bytes(cache.get(), 0) == source_before);
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
  const std::vector<unsigned char> data = kvt::stored_bytes(cache.get(), 0);
  auto unchanged = [&] {
    CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
    CHECK(kvt::stored_bytes(cache.get(), 0) == data);
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
  const std::vector<unsigned char> data = kvt::stored_bytes(cache.get(), 1);
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
  const std::vector<unsigned char> mid_data = kvt::stored_bytes(cache.get(), 1);
  KVT_CHECK_ERR(kvc_append(cache.get(), 1, &batch, &k, &k), KVC_ERR_OUT_OF_MEMORY);
  CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), mid));
  CHECK(kvt::stored_bytes(cache.get(), 1) == mid_data);
  CHECK(kvt::stored_bytes(cache.get(), 0) == data);
}

namespace {

// Element i of raw storage bytes holding T.
template <typename T>
T element(const std::vector<uint8_t>& bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

// The stored K rows of one sequence as f32, from storage of `dtype` (f32 or f16).
std::vector<float> stored_keys(kvc_cache* cache, int32_t seq, kvc_dtype dtype) {
  const kvc::SequenceImage image = kvt::stored_sequence(cache, seq);
  REQUIRE(image.k_dtype == dtype);
  std::vector<float> keys;
  for (const kvc::HeadImage& head : image.heads) {
    for (size_t i = 0; i < head.k.size() / kvc_format_row_bytes(dtype, 1); ++i) {
      keys.push_back(dtype == KVC_DTYPE_F32 ? element<float>(head.k, i)
                                            : kvc_f16_to_f32(element<uint16_t>(head.k, i)));
    }
  }
  return keys;
}

}  // namespace

TEST_CASE("sequences: export then import is bit-exact, in this cache, another, and another layout") {
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    CAPTURE(layout);
    kvt::ContextPtr ctx = kvt::make_context();
    const kvc_cache_params p = params(layout, "h2o");
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    kvt::CachePtr same = kvt::make_cache(ctx.get(), p);
    const kvc_layout other_layout = layout == KVC_LAYOUT_PAGED ? KVC_LAYOUT_CONTIGUOUS : KVC_LAYOUT_PAGED;
    kvt::CachePtr other = kvt::make_cache(ctx.get(), params(other_layout, "h2o"));
    REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
    std::mt19937 rng(13);
    feed(cache.get(), 0, random_chunk(rng, range(0, 30)));
    compress(cache.get(), 0);  // evicts, and leaves effective budgets and statistics behind
    for (int step = 0; step < 5; ++step) feed(cache.get(), 0, random_chunk(rng, {30 + step}));

    const std::vector<uint8_t> bytes = kvt::export_bytes(cache.get(), 0);
    KVT_CHECK_OK(kvc_seq_import(cache.get(), 1, bytes.data(), bytes.size()));
    KVT_CHECK_OK(kvc_seq_import(other.get(), 0, bytes.data(), bytes.size()));
    // Through a file, as another process would.
    const std::string path = (std::filesystem::temp_directory_path() / "kvc_test_sequence.kvcseq").string();
    KVT_CHECK_OK(kvc_seq_export_file(cache.get(), 0, path.c_str()));
    KVT_CHECK_OK(kvc_seq_import_file(same.get(), 0, path.c_str()));
    // The file holds the bytes kvc_seq_export writes.
    {
      std::ifstream in(path, std::ios::binary);
      const std::vector<uint8_t> file_bytes((std::istreambuf_iterator<char>(in)),
                                            std::istreambuf_iterator<char>());
      CHECK(file_bytes == bytes);
    }
    std::filesystem::remove(path);

    const std::vector<unsigned char> original = kvt::stored_bytes(cache.get(), 0);
    CHECK(kvt::stored_bytes(cache.get(), 1) == original);
    CHECK(kvt::stored_bytes(same.get(), 0) == original);
    CHECK(kvt::stored_bytes(other.get(), 0) == original);
    CHECK(kvt::export_bytes(same.get(), 0) == bytes);
    // The same later inputs give the same outputs and, through the statistics and counters,
    // the same compression. Another layout cuts the keys into other segments, so its sums run
    // in another order: equal to rounding.
    for (int step = 0; step < 12; ++step) {
      const Chunk token = random_chunk(rng, {35 + step});
      const std::vector<float> expected = feed(cache.get(), 0, token);
      CHECK(feed(cache.get(), 1, token) == expected);
      CHECK(feed(same.get(), 0, token) == expected);
      const std::vector<float> relaid = feed(other.get(), 0, token);
      REQUIRE(relaid.size() == expected.size());
      for (size_t i = 0; i < expected.size(); ++i) CHECK(relaid[i] == doctest::Approx(expected[i]).epsilon(1e-5));
    }
    for (int32_t s : {0, 1}) compress(cache.get(), s);
    compress(same.get(), 0);
    CHECK(kvt::stored_bytes(cache.get(), 1) == kvt::stored_bytes(cache.get(), 0));
    CHECK(kvt::stored_bytes(same.get(), 0) == kvt::stored_bytes(cache.get(), 0));
  }
}

// Needs the backend's convert entry (plugin ABI 1.6) to demote: on a backend without it (the
// counting_1_0 and strict test backends) a cache that demotes is refused UNSUPPORTED, and this
// test says so and checks nothing more.
TEST_CASE("sequences: a sequence with demoted tokens exports, imports and exports again bit for bit") {
  kvt::ContextPtr ctx = kvt::make_context("stores:\n  host: { plugin: host }\n");
  kvc_cache_params p = params(KVC_LAYOUT_PAGED, "h2o");
  p.backend = kvt::test_backend();
  p.dtype = KVC_DTYPE_F32;
  p.demote_k_dtype = KVC_DTYPE_F16;
  p.demote_v_dtype = KVC_DTYPE_F16;
  kvc_cache* raw = nullptr;
  const Status created(kvc_cache_create(ctx.get(), &p, &raw));
  if (created.code() == KVC_ERR_UNSUPPORTED) {
    MESSAGE("SKIPPED: the backend cannot demote: " << created.describe());
    return;
  }
  REQUIRE_MESSAGE(created.ok(), created.describe());
  kvt::CachePtr cache(raw);
  kvt::CachePtr same = kvt::make_cache(ctx.get(), p);
  kvc_cache_params plain = p;
  plain.demote_k_dtype = plain.demote_v_dtype = -1;
  kvt::CachePtr no_demotion = kvt::make_cache(ctx.get(), plain);
  kvc_cache_params bf16 = p;
  bf16.demote_k_dtype = bf16.demote_v_dtype = KVC_DTYPE_BF16;
  kvt::CachePtr other_formats = kvt::make_cache(ctx.get(), bf16);
  kvc_cache_params tight = p;
  tight.memory_limit = 4 * size_t{kBlock} * (2 * kHeadDim * sizeof(float) + sizeof(int32_t));
  kvt::CachePtr small = kvt::make_cache(ctx.get(), tight);

  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(41);
  feed(cache.get(), 0, random_chunk(rng, range(0, 40)));
  compress(cache.get(), 0);
  for (int step = 0; step < 5; ++step) feed(cache.get(), 0, random_chunk(rng, {40 + step}));
  REQUIRE(kvt::get_stats(cache.get()).tokens_demoted > 0);

  const std::vector<uint8_t> bytes = kvt::export_bytes(cache.get(), 0);
  CHECK(bytes[8] == 5);  // the format version that carries demoted tiers
  const kvc::SequenceImage image = kvc::decode(bytes.data(), bytes.size());
  int32_t demoted = 0;
  for (const kvc::HeadImage& head : image.heads) demoted += head.demoted;
  CHECK(demoted > 0);

  KVT_CHECK_OK(kvc_seq_import(same.get(), 0, bytes.data(), bytes.size()));
  CHECK(kvt::export_bytes(same.get(), 0) == bytes);
  // Through a store, as an offload and a restore.
  KVT_CHECK_OK(kvc_seq_offload(same.get(), 0, "host", "demoted"));
  KVT_CHECK_OK(kvc_seq_restore(same.get(), 0, "host", "demoted"));
  CHECK(kvt::export_bytes(same.get(), 0) == bytes);
  // A prefix is saved only from heads holding positions 0, 1, ... in the cache's formats.
  {
    std::vector<int32_t> ids = range(100, 140);
    kvc_prefix prefix;
    kvc_prefix_init(&prefix, "demoted", ids.data(), static_cast<int32_t>(ids.size()));
    prefix.chunk_tokens = kBlock;
    int32_t saved = -1;
    const Status refused(kvc_prefix_save(cache.get(), 0, "host", &prefix, &saved));
    CHECK(refused.code() == KVC_ERR_UNSUPPORTED);
    CHECK(kvt::contains(refused.message(), "demoted tokens"));
  }
  // Demoted rows import only as they are, into a cache demoting into their formats.
  for (kvc_cache* refusing : {no_demotion.get(), other_formats.get()}) {
    KVT_CHECK_ERR(kvc_seq_import(refusing, 0, bytes.data(), bytes.size()), KVC_ERR_UNSUPPORTED);
    CHECK(kvt::get_stats(refusing).sequences == 0);
  }
  // All or nothing: four blocks do not hold the tiers of 4 heads, and nothing is left.
  KVT_CHECK_ERR(kvc_seq_import(small.get(), 0, bytes.data(), bytes.size()), KVC_ERR_OUT_OF_MEMORY);
  CHECK(kvt::get_stats(small.get()).sequences == 0);
  CHECK(kvt::get_stats(small.get()).bytes_used == 0);
  // The same later inputs give the same outputs, through both tiers.
  for (int step = 0; step < 6; ++step) {
    const Chunk token = random_chunk(rng, {45 + step});
    const std::vector<float> expected = feed(cache.get(), 0, token);
    CHECK(feed(same.get(), 0, token) == expected);
  }
  CHECK(kvt::export_bytes(same.get(), 0) == kvt::export_bytes(cache.get(), 0));
}

TEST_CASE("sequences: f16 bytes import exactly into an f32 cache; lossy imports are refused") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr half = kvt::make_cache(ctx.get(), params(KVC_LAYOUT_PAGED, nullptr));
  kvc_cache_params p32 = params(KVC_LAYOUT_CONTIGUOUS, nullptr);
  p32.dtype = KVC_DTYPE_F32;
  kvt::CachePtr full = kvt::make_cache(ctx.get(), p32);
  kvc_cache_params pbf = params(KVC_LAYOUT_PAGED, nullptr);
  pbf.dtype = KVC_DTYPE_BF16;
  kvt::CachePtr brain = kvt::make_cache(ctx.get(), pbf);
  REQUIRE(kvc_seq_create(half.get(), 0) == nullptr);
  std::mt19937 rng(17);
  feed(half.get(), 0, random_chunk(rng, range(0, 20)));
  const std::vector<uint8_t> bytes = kvt::export_bytes(half.get(), 0);
  KVT_CHECK_OK(kvc_seq_import(full.get(), 0, bytes.data(), bytes.size()));
  CHECK(stored_keys(full.get(), 0, KVC_DTYPE_F32) == stored_keys(half.get(), 0, KVC_DTYPE_F16));
  CHECK(kvt::stored_positions(full.get(), 0, 1, 1) == kvt::stored_positions(half.get(), 0, 1, 1));
  // f16 into bf16 would lose mantissa bits; f32 into f16 too.
  KVT_CHECK_ERR(kvc_seq_import(brain.get(), 0, bytes.data(), bytes.size()), KVC_ERR_UNSUPPORTED);
  const std::vector<uint8_t> wide = kvt::export_bytes(full.get(), 0);
  KVT_CHECK_ERR(kvc_seq_import(half.get(), 1, wide.data(), wide.size()), KVC_ERR_UNSUPPORTED);
  CHECK(kvt::get_stats(brain.get()).sequences == 0);
  CHECK(kvt::get_stats(half.get()).sequences == 1);
}

TEST_CASE("sequences: bad export bytes and refused imports are clear errors that change nothing") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(KVC_LAYOUT_PAGED, nullptr));
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(19);
  feed(cache.get(), 0, random_chunk(rng, range(0, 10)));
  const std::vector<uint8_t> bytes = kvt::export_bytes(cache.get(), 0);
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  auto refused = [&](const std::vector<uint8_t>& data, kvc_status_code code) {
    kvt::Status st{kvc_seq_import(cache.get(), 1, data.data(), data.size())};
    INFO(st.describe());
    CHECK(st.code() == code);
    CHECK(!st.message().empty());
    CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
  };
  for (size_t n : {size_t{0}, size_t{1}, size_t{8}, size_t{55}, bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(n);
    refused(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n)),
            KVC_ERR_INVALID_ARGUMENT);
  }
  for (size_t bit = 0; bit < bytes.size() * 8; bit += 61) {
    CAPTURE(bit);
    std::vector<uint8_t> flipped = bytes;
    flipped[bit / 8] = static_cast<uint8_t>(flipped[bit / 8] ^ (1u << (bit % 8)));
    kvt::Status st{kvc_seq_import(cache.get(), 1, flipped.data(), flipped.size())};
    CHECK(!st.ok());
    CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  refused(longer, KVC_ERR_INVALID_ARGUMENT);

  // Valid bytes a cache cannot take.
  kvc_cache_params other_shape = params(KVC_LAYOUT_PAGED, nullptr);
  other_shape.head_dim = kHeadDim * 2;
  kvt::CachePtr wrong = kvt::make_cache(ctx.get(), other_shape);
  KVT_CHECK_ERR(kvc_seq_import(wrong.get(), 0, bytes.data(), bytes.size()), KVC_ERR_INVALID_ARGUMENT);
  kvt::CachePtr needs_stats = kvt::make_cache(ctx.get(), params(KVC_LAYOUT_PAGED, "h2o"));
  KVT_CHECK_ERR(kvc_seq_import(needs_stats.get(), 0, bytes.data(), bytes.size()), KVC_ERR_UNSUPPORTED);
  kvc_cache_params tiny = params(KVC_LAYOUT_PAGED, nullptr);
  tiny.memory_limit = 4096;
  kvt::CachePtr small = kvt::make_cache(ctx.get(), tiny);
  KVT_CHECK_ERR(kvc_seq_import(small.get(), 0, bytes.data(), bytes.size()), KVC_ERR_OUT_OF_MEMORY);
  CHECK(kvt::get_stats(small.get()).bytes_used == 0);
  CHECK(kvt::get_stats(small.get()).sequences == 0);
  KVT_CHECK_ERR(kvc_seq_import(cache.get(), 0, bytes.data(), bytes.size()), KVC_ERR_ALREADY_EXISTS);

  // Calls misused.
  size_t written = 0;
  std::vector<uint8_t> short_buffer(bytes.size() - 1, 0xAB);
  KVT_CHECK_ERR(kvc_seq_export(cache.get(), 0, short_buffer.data(), short_buffer.size(), &written),
                KVC_ERR_INVALID_ARGUMENT);
  CHECK(std::all_of(short_buffer.begin(), short_buffer.end(), [](uint8_t b) { return b == 0xAB; }));
  KVT_CHECK_ERR(kvc_seq_export(cache.get(), 9, short_buffer.data(), short_buffer.size(), &written),
                KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_seq_export_size(cache.get(), 0, nullptr), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_import(cache.get(), 1, nullptr, 10), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_import(nullptr, 1, bytes.data(), bytes.size()), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_import_file(cache.get(), 1, "/nonexistent/kvc.seq"), KVC_ERR_NOT_FOUND);
  const std::string folder = std::filesystem::temp_directory_path().string();
  KVT_CHECK_ERR(kvc_seq_import_file(cache.get(), 1, folder.c_str()), KVC_ERR_IO);
  KVT_CHECK_ERR(kvc_seq_export_file(cache.get(), 0, "/nonexistent/dir/kvc.seq"), KVC_ERR_IO);
  KVT_CHECK_ERR(kvc_seq_export_file(cache.get(), 0, nullptr), KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
}

TEST_CASE("sequences: the contiguous layout gives back capacity a truncation leaves unused") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(KVC_LAYOUT_CONTIGUOUS, nullptr));
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(23);
  feed(cache.get(), 0, random_chunk(rng, range(0, 64)));
  const size_t token_bytes = 2 * kHeadDim * 2 + sizeof(int32_t);
  const size_t heads = kLayers * kKvHeads;
  CHECK(kvt::get_stats(cache.get()).bytes_used == heads * 64 * token_bytes);
  // 20 of 64 is more than a quarter: kept. 10 is less: shrunk to twice that.
  KVT_CHECK_OK(kvc_seq_truncate(cache.get(), 0, 20));
  CHECK(kvt::get_stats(cache.get()).bytes_used == heads * 64 * token_bytes);
  KVT_CHECK_OK(kvc_seq_truncate(cache.get(), 0, 10));
  CHECK(kvt::get_stats(cache.get()).bytes_used == heads * 20 * token_bytes);
  const Chunk next = random_chunk(rng, range(10, 14));
  kvt::CachePtr fresh = kvt::make_cache(ctx.get(), params(KVC_LAYOUT_CONTIGUOUS, nullptr));
  REQUIRE(kvc_seq_create(fresh.get(), 0) == nullptr);
  std::mt19937 same(23);
  const Chunk first = random_chunk(same, range(0, 64));
  Chunk ten = first;
  ten.pos.resize(10);
  ten.q.resize(10 * kQHeads * kHeadDim);
  ten.k.resize(10 * kKvHeads * kHeadDim);
  ten.v.resize(ten.k.size());
  feed(fresh.get(), 0, ten);
  CHECK(feed(cache.get(), 0, next) == feed(fresh.get(), 0, next));
}

TEST_CASE("sequences: the peak estimate follows compaction's shrinking (contiguous, once)") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = params(KVC_LAYOUT_CONTIGUOUS, "h2o");
  p.budget = 32;
  p.prefill = KVC_PREFILL_ONCE;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  size_t estimate = 0;
  KVT_CHECK_OK(kvc_cache_estimate_peak_bytes(cache.get(), 256, 64, 8, &estimate));
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  std::mt19937 rng(29);
  for (int32_t start = 0; start < 256; start += 64) feed(cache.get(), 0, random_chunk(rng, range(start, start + 64)));
  for (int32_t step = 0; step < 8; ++step) feed(cache.get(), 0, random_chunk(rng, {256 + step}));
  const kvc_cache_stats stats = kvt::get_stats(cache.get());
  CHECK(kvt::seq_length(cache.get(), 0, 1, 1) == 32 + 8);
  CHECK(stats.bytes_peak == estimate);
  // The compaction to 32 of 256 shrank the segments.
  CHECK(stats.bytes_used < estimate / 4);
}

namespace {

// An append batch whose K comes as f32 rows padded around the KV heads (as K would lie in a
// fused QKV row) and V in its bf16 storage format with a row stride of its own, into a cache
// storing K as f16 and V as bf16 (K too as bf16 on a backend of one format for both, the
// cuda backend's kernels and one built against plugin ABI 1.0): each stored row checked
// against its hand-converted source.
struct UnevenAppend {
  int32_t kv_heads, head_dim, block_tokens;
  std::vector<std::vector<int32_t>> appends;  // per append, the new tokens of sequences 0, 1, ...
};

float k_value(int32_t seq, int32_t pos, int32_t head, int32_t i) {
  return static_cast<float>((seq * 7919 + pos * 131 + head * 17 + i) % 2011) * 0.37f - 301.0f;
}

float v_value(int32_t seq, int32_t pos, int32_t head, int32_t i) {
  return static_cast<float>((seq * 104729 + pos * 37 + head * 3 + i * 11) % 997) * -0.125f + 40.0f;
}

void check_uneven_append(const UnevenAppend& shape) {
  const int32_t heads = shape.kv_heads, dim = shape.head_dim, layer = 1;
  const size_t row = static_cast<size_t>(heads) * dim;
  const size_t k_pad = 5, k_stride = row + 9;  // K of a token: elements [k_pad, k_pad + row)
  const size_t v_stride = row + 3;
  const int32_t n_seqs = static_cast<int32_t>(shape.appends.front().size());
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 2;
  p.kv_heads = heads;
  p.q_heads = heads;
  p.head_dim = dim;
  const std::string backend = kvt::test_backend() ? kvt::test_backend() : "";
  const bool one_format = backend == "cuda" || backend == "counting_1_0";
  const kvc_dtype k_storage = one_format ? KVC_DTYPE_BF16 : KVC_DTYPE_F16;
  p.k_dtype = k_storage;
  p.v_dtype = KVC_DTYPE_BF16;
  p.block_tokens = shape.block_tokens;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  std::vector<int32_t> ids(static_cast<size_t>(n_seqs));
  for (int32_t s = 0; s < n_seqs; ++s) {
    ids[static_cast<size_t>(s)] = s;
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), s));
  }
  std::vector<int32_t> length(static_cast<size_t>(n_seqs), 0);
  for (const std::vector<int32_t>& n_tokens : shape.appends) {
    std::vector<int32_t> positions;
    std::vector<int32_t> owner;
    for (int32_t s = 0; s < n_seqs; ++s) {
      for (int32_t t = 0; t < n_tokens[static_cast<size_t>(s)]; ++t) {
        positions.push_back(length[static_cast<size_t>(s)] + t);
        owner.push_back(s);
      }
      length[static_cast<size_t>(s)] += n_tokens[static_cast<size_t>(s)];
    }
    std::vector<float> k(positions.size() * k_stride, 1e30f);
    std::vector<uint16_t> v(positions.size() * v_stride, 0x7fc0);
    for (size_t t = 0; t < positions.size(); ++t) {
      for (int32_t h = 0; h < heads; ++h) {
        for (int32_t i = 0; i < dim; ++i) {
          const size_t e = static_cast<size_t>(h) * dim + i;
          k[t * k_stride + k_pad + e] = k_value(owner[t], positions[t], h, i);
          v[t * v_stride + e] = ref::f32_to_bf16(v_value(owner[t], positions[t], h, i));
        }
      }
    }
    kvc_batch batch;
    kvc_batch_init(&batch, n_seqs, ids.data(), n_tokens.data(), positions.data());
    const kvc_tensor kt = kvt::tensor(k.data() + k_pad, KVC_DTYPE_F32, k_stride);
    const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_BF16, v_stride);
    KVT_REQUIRE_OK(kvc_append(cache.get(), layer, &batch, &kt, &vt));
  }
  for (int32_t s = 0; s < n_seqs; ++s) {
    const kvc::SequenceImage image = kvt::stored_sequence(cache.get(), s);
    for (int32_t h = 0; h < heads; ++h) {
      CHECK(image.heads[static_cast<size_t>(h)].positions.empty());  // layer 0: nothing
      const kvc::HeadImage& head = image.heads[static_cast<size_t>(layer * heads + h)];
      const int32_t n = length[static_cast<size_t>(s)];
      REQUIRE(head.positions.size() == static_cast<size_t>(n));
      std::vector<uint16_t> k_expected, v_expected;
      for (int32_t pos = 0; pos < n; ++pos) {
        CHECK(head.positions[static_cast<size_t>(pos)] == pos);
        for (int32_t i = 0; i < dim; ++i) {
          const float k_source = k_value(s, pos, h, i);
          k_expected.push_back(k_storage == KVC_DTYPE_F16 ? ref::f32_to_f16(k_source)
                                                          : ref::f32_to_bf16(k_source));
          v_expected.push_back(ref::f32_to_bf16(v_value(s, pos, h, i)));
        }
      }
      INFO("sequence " << s << ", KV head " << h);
      REQUIRE(head.k.size() == k_expected.size() * sizeof(uint16_t));
      REQUIRE(head.v.size() == v_expected.size() * sizeof(uint16_t));
      CHECK(std::memcmp(head.k.data(), k_expected.data(), head.k.size()) == 0);
      CHECK(std::memcmp(head.v.data(), v_expected.data(), head.v.size()) == 0);
    }
  }
}

}  // namespace

TEST_CASE("sequences: an uneven batch of padded f32 K and strided bf16 V is stored row for row") {
  // Small appends (copied slot by slot), over block boundaries and into part-filled blocks.
  check_uneven_append({3, 8, 4, {{5, 1, 7}, {2, 3, 1}, {1, 1, 1}}});
}

TEST_CASE("sequences: a large uneven append (copied in token order) is stored row for row") {
  // Over 4 MiB of storage in one call: the cpu backend's token-order copy.
  check_uneven_append({4, 128, 256, {{3, 1, 2}, {1900, 7, 1100}}});
}
