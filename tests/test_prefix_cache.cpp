// The prefix cache through the C API: an attached prefix gives the attention of a full
// prefill bit for bit, cached blocks outlive their sequences and are reclaimed least recently
// used first (leaves first) exactly when memory is needed, compression never changes a shared
// block (and is written in place, the cache letting go of it, when its copy does not fit), the
// prefix store continues and takes what the cache publishes, random calls keep the counters
// exact and the sequences as a cache without a prefix cache stores them, and misuse is refused.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host_reads.hpp"
#include "test_support.hpp"

namespace {

using kvt::Status;

constexpr int kLayers = 2;
constexpr int kKvHeads = 2;
constexpr int kQHeads = 4;
constexpr int kHeadDim = 32;  // a whole group of the quantized formats
constexpr int kBlock = 8;
const char* const kModel = "test-model";

// The engine's K, V and Q of a token depend on its id and position only, as a model's do.
struct Chunk {
  std::vector<float> q, k, v;
  std::vector<int32_t> pos;
};

Chunk chunk_of(const std::vector<int32_t>& ids, int32_t first, int32_t end) {
  Chunk c;
  for (int32_t p = first; p < end; ++p) {
    std::mt19937 rng(static_cast<uint32_t>(ids[static_cast<size_t>(p)] * 7919 + p));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int i = 0; i < kQHeads * kHeadDim; ++i) c.q.push_back(u(rng));
    for (int i = 0; i < kKvHeads * kHeadDim; ++i) c.k.push_back(u(rng));
    for (int i = 0; i < kKvHeads * kHeadDim; ++i) c.v.push_back(u(rng));
    c.pos.push_back(p);
  }
  return c;
}

// append_attend of a chunk on every layer: the outputs of all layers, concatenated, in `all`;
// false when a call fails. Safe on any thread.
bool try_feed(kvc_cache* cache, int32_t seq, const Chunk& c, std::vector<float>& all) {
  const int32_t n = static_cast<int32_t>(c.pos.size());
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, c.pos.data());
  all.clear();
  for (int layer = 0; layer < kLayers; ++layer) {
    std::vector<float> out(c.q.size());
    kvc_tensor q = kvt::tensor(c.q.data(), KVC_DTYPE_F32);
    kvc_tensor k = kvt::tensor(c.k.data(), KVC_DTYPE_F32);
    kvc_tensor v = kvt::tensor(c.v.data(), KVC_DTYPE_F32);
    kvc_tensor_mut o = kvt::tensor_mut(out.data());
    if (!Status(kvc_append_attend(cache, layer, &batch, &q, &k, &v, nullptr, &o)).ok()) return false;
    all.insert(all.end(), out.begin(), out.end());
  }
  return true;
}

std::vector<float> feed(kvc_cache* cache, int32_t seq, const Chunk& c) {
  std::vector<float> all;
  REQUIRE(try_feed(cache, seq, c, all));
  return all;
}

std::vector<int32_t> prompt(int32_t n, int32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 30000);
  return ids;
}

kvc_cache_params params(bool prefix_cache, size_t memory_limit = size_t{64} << 20) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = KVC_DTYPE_F16;
  p.block_tokens = kBlock;
  p.memory_limit = memory_limit;
  p.prefix_cache = prefix_cache ? 1 : 0;
  return p;
}

kvc_prefix prefix_of(const std::vector<int32_t>& ids, int32_t n = -1) {
  kvc_prefix prefix;
  kvc_prefix_init(&prefix, kModel, ids.data(), n < 0 ? static_cast<int32_t>(ids.size()) : n);
  return prefix;
}

int32_t publish(kvc_cache* cache, int32_t seq, const std::vector<int32_t>& ids, int32_t n = -1) {
  const kvc_prefix prefix = prefix_of(ids, n);
  int32_t tokens = -1;
  KVT_REQUIRE_OK(kvc_prefix_publish(cache, seq, &prefix, &tokens));
  return tokens;
}

int32_t attach(kvc_cache* cache, int32_t seq, const std::vector<int32_t>& ids, int32_t n = -1) {
  const kvc_prefix prefix = prefix_of(ids, n);
  int32_t tokens = -1;
  KVT_REQUIRE_OK(kvc_prefix_attach(cache, seq, &prefix, &tokens));
  return tokens;
}

int32_t lookup(kvc_cache* cache, const std::vector<int32_t>& ids) {
  const kvc_prefix prefix = prefix_of(ids);
  int32_t tokens = -1;
  KVT_REQUIRE_OK(kvc_prefix_lookup(cache, &prefix, &tokens));
  return tokens;
}

// A sequence holding the prompt's first n tokens, prefilled in one chunk, then published.
void prefill_and_publish(kvc_cache* cache, int32_t seq, const std::vector<int32_t>& ids) {
  KVT_REQUIRE_OK(kvc_seq_create(cache, seq));
  feed(cache, seq, chunk_of(ids, 0, static_cast<int32_t>(ids.size())));
  publish(cache, seq, ids);
}

// The memory of one full block on every (layer, KV head) of a cache made with `p`.
size_t node_bytes(kvc_context* ctx, const kvc_cache_params& p) {
  kvt::CachePtr probe = kvt::make_cache(ctx, p);
  KVT_REQUIRE_OK(kvc_seq_create(probe.get(), 0));
  feed(probe.get(), 0, chunk_of(prompt(kBlock, 99), 0, kBlock));
  return kvt::get_stats(probe.get()).bytes_used;
}

// A prefix cache whose streaming policy (4 sinks, 4 recent, budget 8) compresses a prompt
// once, when its first decode token arrives.
kvc_cache_params once_streaming_params(size_t memory_limit) {
  kvc_cache_params p = params(true, memory_limit);
  p.policy = "streaming";
  p.sinks = 4;
  p.recent = 4;
  p.budget = 8;
  p.prefill = KVC_PREFILL_ONCE;
  return p;
}

// A cache whose prefix store is the context's "mem", writing its blocks through or not.
kvt::CachePtr store_cache(kvc_context* ctx, bool write_through) {
  kvc_cache_params p = params(true);
  p.prefix_store = "mem";
  p.prefix_write_through = write_through ? 1 : 0;
  return kvt::make_cache(ctx, p);
}

}  // namespace

TEST_CASE("prefix cache: an attached prefix then its rest give a full prefill's attention, bit for bit") {
  struct Storage {
    kvc_dtype format;
    kvc_rotation rotation;
  };
  for (const Storage storage : {Storage{KVC_DTYPE_F16, KVC_ROTATION_NONE},
                                Storage{KVC_DTYPE_Q8_0, KVC_ROTATION_NONE},
                                Storage{KVC_DTYPE_Q4_0, KVC_ROTATION_HADAMARD}}) {
    CAPTURE(storage.format);
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache_params p = params(true);
    p.dtype = storage.format;
    p.k_rotation = storage.rotation;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    p.prefix_cache = 0;
    kvt::CachePtr reference = kvt::make_cache(ctx.get(), p);
    const std::vector<int32_t> system = prompt(21, 1);
    std::vector<int32_t> request = system;
    const std::vector<int32_t> question = prompt(11, 2);
    request.resize(16);  // the question starts after the system prompt's two whole blocks
    request.insert(request.end(), question.begin(), question.end());

    prefill_and_publish(cache.get(), 0, system);
    CHECK(lookup(cache.get(), system) == 16);
    CHECK(lookup(cache.get(), request) == 16);
    std::vector<int32_t> other = request;
    other[9] += 1;  // differs in the second block
    CHECK(lookup(cache.get(), other) == 8);

    const kvc_cache_stats before = kvt::get_stats(cache.get());
    CHECK(attach(cache.get(), 1, request) == 16);
    const kvc_cache_stats attached = kvt::get_stats(cache.get());
    CHECK(attached.bytes_used == before.bytes_used);  // nothing copied: no statistics tracked
    CHECK(attached.bytes_shared == 2 * kLayers * kKvHeads * (before.bytes_used / before.blocks_used));
    CHECK(attached.prefix_hits == 1);
    CHECK(attached.prefix_tokens_reused == 16);
    CHECK(attached.sequences == 2);
    for (int layer = 0; layer < kLayers; ++layer) {
      for (int h = 0; h < kKvHeads; ++h) CHECK(kvt::seq_length(cache.get(), 1, layer, h) == 16);
    }

    // The rest, in the chunk a full prefill would compute too.
    const Chunk rest = chunk_of(request, 16, static_cast<int32_t>(request.size()));
    KVT_REQUIRE_OK(kvc_seq_create(reference.get(), 1));
    feed(reference.get(), 1, chunk_of(request, 0, 16));
    CHECK(feed(cache.get(), 1, rest) == feed(reference.get(), 1, rest));
    CHECK(kvt::stored_bytes(cache.get(), 1) == kvt::stored_bytes(reference.get(), 1));
    const Chunk next = chunk_of(std::vector<int32_t>(40, 5), 27, 28);
    CHECK(feed(cache.get(), 1, next) == feed(reference.get(), 1, next));
    // The publisher was not changed by the attached branch.
    CHECK(kvt::stored_positions(cache.get(), 0, 1, 1).size() == 21);
  }
}

TEST_CASE("prefix cache: blocks outlive their sequences, counted as cached, and attach again") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(true));
  const std::vector<int32_t> ids = prompt(20, 3);
  prefill_and_publish(cache.get(), 0, ids);
  const size_t block_bytes = kvt::get_stats(cache.get()).bytes_used / kvt::get_stats(cache.get()).blocks_used;
  CHECK(kvt::get_stats(cache.get()).bytes_cached == 0);
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 0));
  kvc_cache_stats s = kvt::get_stats(cache.get());
  CHECK(s.sequences == 0);
  CHECK(s.bytes_cached == 2 * kLayers * kKvHeads * block_bytes);  // the open third block went back
  CHECK(s.bytes_used == s.bytes_cached);
  CHECK(s.blocks_free == s.bytes_limit / block_bytes);
  CHECK(attach(cache.get(), 1, ids) == 16);
  s = kvt::get_stats(cache.get());
  CHECK(s.bytes_cached == 0);
  CHECK(s.bytes_shared == 0);  // one sequence holds them (the cache's hold is not a sequence)
  CHECK(s.tokens_stored == 16u * kLayers * kKvHeads);
  // A second attach shares them between the two sequences.
  CHECK(attach(cache.get(), 2, ids) == 16);
  CHECK(kvt::get_stats(cache.get()).bytes_shared == 2 * kLayers * kKvHeads * block_bytes);
  CHECK(kvt::stored_bytes(cache.get(), 1) == kvt::stored_bytes(cache.get(), 2));
  // Appending to an attached sequence opens a new block; the cached ones stay unchanged.
  feed(cache.get(), 1, chunk_of(ids, 16, 20));
  CHECK(kvt::stored_positions(cache.get(), 2, 0, 0).size() == 16);
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 1));
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 2));
  CHECK(kvt::get_stats(cache.get()).bytes_cached == 2 * kLayers * kKvHeads * block_bytes);
  CHECK(kvt::get_stats(cache.get()).prefix_hits == 2);
}

TEST_CASE("prefix cache: memory is reclaimed least recently used first, leaves first, never failing live sequences") {
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t node = node_bytes(ctx.get(), params(false));
  // Room for 6 whole blocks on every head: three prompts of 2 blocks, cached.
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(true, 6 * node));
  const std::vector<int32_t> a = prompt(16, 10), b = prompt(16, 11), c = prompt(16, 12);
  int32_t seq = 0;
  for (const auto* ids : {&a, &b, &c}) {
    prefill_and_publish(cache.get(), seq, *ids);
    KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), seq++));
  }
  CHECK(kvt::get_stats(cache.get()).bytes_cached == 6 * node);
  CHECK(lookup(cache.get(), a) == 16);  // a is now more recent than b

  // A new prompt of one block needs one node's memory: b's second block goes, a leaf.
  const std::vector<int32_t> d = prompt(8, 13);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), seq));
  feed(cache.get(), seq, chunk_of(d, 0, 8));
  kvc_cache_stats s = kvt::get_stats(cache.get());
  CHECK(s.bytes_reclaimed == node);
  CHECK(s.bytes_cached == 5 * node);
  CHECK(lookup(cache.get(), a) == 16);
  CHECK(lookup(cache.get(), b) == 8);
  CHECK(lookup(cache.get(), c) == 16);
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), seq++));

  // A long run of requests under the limit never fails while the live ones fit.
  for (int round = 0; round < 30; ++round) {
    const std::vector<int32_t> ids = prompt(8 + round % 17, 100 + round % 3);
    const int32_t got = attach(cache.get(), seq, ids);
    const int32_t n = static_cast<int32_t>(ids.size());
    if (got < n) feed(cache.get(), seq, chunk_of(ids, got, n));
    publish(cache.get(), seq, ids);
    KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), seq++));
    s = kvt::get_stats(cache.get());
    REQUIRE(s.bytes_used <= s.bytes_limit);
  }
  CHECK(kvt::get_stats(cache.get()).prefix_hits > 0);

  // Live sequences alone that do not fit are OUT_OF_MEMORY, changing nothing.
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), seq));
  const kvc_cache_stats full = kvt::get_stats(cache.get());
  // 13 blocks on each of the layer's heads: more than the 6 nodes' 12 of the limit.
  const std::vector<int32_t> long_ids = prompt(13 * kBlock, 14);
  const Chunk too_long = chunk_of(long_ids, 0, 13 * kBlock);
  const int32_t n = 13 * kBlock;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, too_long.pos.data());
  kvc_tensor k = kvt::tensor(too_long.k.data(), KVC_DTYPE_F32);
  kvc_tensor v = kvt::tensor(too_long.v.data(), KVC_DTYPE_F32);
  KVT_CHECK_ERR(kvc_append(cache.get(), 0, &batch, &k, &v), KVC_ERR_OUT_OF_MEMORY);
  CHECK(kvt::stats_equal(full, kvt::get_stats(cache.get())));
}

TEST_CASE("prefix cache: a compression never changes a shared block, and publishes stop at the first evicted token") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = params(true);
  p.policy = "streaming";
  p.sinks = 4;
  p.recent = 8;
  p.budget = 12;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  const std::vector<int32_t> ids = prompt(40, 5);
  prefill_and_publish(cache.get(), 0, ids);
  CHECK(attach(cache.get(), 1, ids) == 40 / kBlock * kBlock);
  const std::vector<unsigned char> attached = kvt::stored_bytes(cache.get(), 1);
  // The publisher compresses: its first block holds the sinks and evicted tokens after them.
  const int32_t zero = 0;
  KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &zero));
  CHECK(kvt::stored_positions(cache.get(), 0, 0, 0).size() == 12);
  CHECK(kvt::stored_bytes(cache.get(), 1) == attached);
  CHECK(lookup(cache.get(), ids) == 40);
  // Compressed heads hold positions 0..3 in order, then a gap: nothing whole to publish.
  CHECK(publish(cache.get(), 0, prompt(40, 6)) == 0);

  // A compression that keeps the first block whole leaves it shared.
  kvc_cache_params q = params(true);
  q.policy = "streaming";
  q.sinks = kBlock;
  q.recent = kBlock;
  q.budget = 2 * kBlock;
  kvt::CachePtr sinks = kvt::make_cache(ctx.get(), q);
  prefill_and_publish(sinks.get(), 0, ids);
  CHECK(attach(sinks.get(), 1, ids) == 40);
  const size_t shared_before = kvt::get_stats(sinks.get()).bytes_shared;
  KVT_REQUIRE_OK(kvc_compress(sinks.get(), -1, 1, &zero));
  const size_t block_bytes = shared_before / (5 * kLayers * kKvHeads);
  // Block 0 (the sinks) is still shared with sequence 1; the others were copied or let go.
  CHECK(kvt::get_stats(sinks.get()).bytes_shared == block_bytes * kLayers * kKvHeads);
  CHECK(publish(sinks.get(), 0, ids) == kBlock);
}

TEST_CASE("prefix cache: the prefix store continues an attach and takes the blocks published") {
  kvt::ContextPtr ctx = kvt::make_context("stores:\n  mem: { plugin: host }\n");
  kvt::CachePtr first = store_cache(ctx.get(), true);
  kvt::CachePtr second = store_cache(ctx.get(), false);
  const std::vector<int32_t> ids = prompt(30, 7);
  prefill_and_publish(first.get(), 0, ids);

  // The same keys: kvc_prefix_load with chunks of block_tokens finds what the cache wrote.
  kvt::CachePtr plain = kvt::make_cache(ctx.get(), params(false));
  kvc_prefix chunks = prefix_of(ids);
  chunks.chunk_tokens = kBlock;
  int32_t loaded = -1;
  KVT_REQUIRE_OK(kvc_prefix_load(plain.get(), 0, "mem", &chunks, &loaded));
  CHECK(loaded == 24);

  CHECK(lookup(second.get(), ids) == 0);
  CHECK(attach(second.get(), 0, ids) == 24);
  CHECK(kvt::get_stats(second.get()).prefix_hits == 1);  // an attach from the store is a hit
  CHECK(kvt::get_stats(second.get()).prefix_tokens_reused == 24);
  CHECK(kvt::stored_bytes(second.get(), 0) == kvt::stored_bytes(plain.get(), 0));
  CHECK(lookup(second.get(), ids) == 24);  // published as it was loaded
  CHECK(attach(second.get(), 1, ids) == 24);
  CHECK(kvt::get_stats(second.get()).bytes_shared > 0);
}

TEST_CASE("prefix cache: threads attaching, publishing and removing under a tight limit get a full prefill's attention") {
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t node = node_bytes(ctx.get(), params(false));
  // 12 nodes: the live sequences always fit (4 x 3 blocks at most), the 18 blocks of all
  // the requests do not.
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(true, 12 * node));
  kvt::CachePtr reference = kvt::make_cache(ctx.get(), params(false));
  constexpr int kSystems = 3, kQuestions = 4, kThreads = 4, kRounds = 25;
  // Request (s, q): system prompt s (two blocks), question q (one block).
  std::vector<std::vector<int32_t>> requests;
  std::vector<std::vector<float>> expected;  // the question chunk's attention
  for (int sys = 0; sys < kSystems; ++sys) {
    for (int q = 0; q < kQuestions; ++q) {
      std::vector<int32_t> ids = prompt(2 * kBlock, 20 + sys);
      const std::vector<int32_t> question = prompt(kBlock, 40 + q);
      ids.insert(ids.end(), question.begin(), question.end());
      const int32_t seq = static_cast<int32_t>(requests.size());
      KVT_REQUIRE_OK(kvc_seq_create(reference.get(), seq));
      feed(reference.get(), seq, chunk_of(ids, 0, 2 * kBlock));
      expected.push_back(feed(reference.get(), seq, chunk_of(ids, 2 * kBlock, 3 * kBlock)));
      requests.push_back(std::move(ids));
    }
  }
  std::vector<int> mismatches(kThreads, 0), failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const size_t r = static_cast<size_t>((t * 7 + round * 5) % (kSystems * kQuestions));
        const std::vector<int32_t>& ids = requests[r];
        const int32_t seq = t * 1000 + round;
        const kvc_prefix prefix = prefix_of(ids, 3 * kBlock - 1);
        int32_t got = -1;
        if (!Status(kvc_prefix_attach(cache.get(), seq, &prefix, &got)).ok()) {
          ++failures[static_cast<size_t>(t)];
          continue;
        }
        std::vector<float> out;
        if ((got < 2 * kBlock && !try_feed(cache.get(), seq, chunk_of(ids, got, 2 * kBlock), out)) ||
            !try_feed(cache.get(), seq, chunk_of(ids, 2 * kBlock, 3 * kBlock), out)) {
          ++failures[static_cast<size_t>(t)];
        } else if (out != expected[r]) {
          ++mismatches[static_cast<size_t>(t)];
        }
        const kvc_prefix whole = prefix_of(ids);
        int32_t published = -1;
        if (!Status(kvc_prefix_publish(cache.get(), seq, &whole, &published)).ok() ||
            published != 3 * kBlock) {
          ++failures[static_cast<size_t>(t)];
        }
        if (!Status(kvc_seq_remove(cache.get(), seq)).ok()) ++failures[static_cast<size_t>(t)];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(mismatches[static_cast<size_t>(t)] == 0);
    CHECK(failures[static_cast<size_t>(t)] == 0);
  }
  const kvc_cache_stats s = kvt::get_stats(cache.get());
  CHECK(s.sequences == 0);
  CHECK(s.bytes_used == s.bytes_cached);
  CHECK(s.bytes_used <= s.bytes_limit);
  CHECK(s.prefix_hits > 0);
  CHECK(s.bytes_reclaimed > 0);
}

TEST_CASE("prefix cache: misuse is refused, naming the problem, changing nothing") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr plain = kvt::make_cache(ctx.get(), params(false));
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(true));
  const std::vector<int32_t> ids = prompt(16, 8);
  const kvc_prefix prefix = prefix_of(ids);
  int32_t tokens = -7;
  {
    Status s(kvc_prefix_attach(plain.get(), 0, &prefix, &tokens));
    CHECK(s.code() == KVC_ERR_UNSUPPORTED);
    CHECK(kvt::contains(s.message(), "prefix_cache"));
  }
  KVT_CHECK_ERR(kvc_prefix_publish(plain.get(), 0, &prefix, &tokens), KVC_ERR_UNSUPPORTED);
  KVT_CHECK_ERR(kvc_prefix_lookup(plain.get(), &prefix, &tokens), KVC_ERR_UNSUPPORTED);
  KVT_CHECK_ERR(kvc_prefix_attach(nullptr, 0, &prefix, &tokens), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_prefix_attach(cache.get(), 0, nullptr, &tokens), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_prefix_attach(cache.get(), 0, &prefix, nullptr), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_prefix_attach(cache.get(), -1, &prefix, &tokens), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_prefix_publish(cache.get(), 3, &prefix, &tokens), KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_prefix_lookup(cache.get(), &prefix, nullptr), KVC_ERR_INVALID_ARGUMENT);
  kvc_prefix bad = prefix;
  bad.n_tokens = -1;
  KVT_CHECK_ERR(kvc_prefix_lookup(cache.get(), &bad, &tokens), KVC_ERR_INVALID_ARGUMENT);
  bad = prefix;
  bad.model = "";
  KVT_CHECK_ERR(kvc_prefix_lookup(cache.get(), &bad, &tokens), KVC_ERR_INVALID_ARGUMENT);
  bad = prefix;
  bad.token_ids = nullptr;
  KVT_CHECK_ERR(kvc_prefix_attach(cache.get(), 0, &bad, &tokens), KVC_ERR_INVALID_ARGUMENT);
  CHECK(tokens == -7);
  // chunk_tokens is not read by the prefix cache's calls.
  bad = prefix;
  bad.chunk_tokens = 0;
  KVT_CHECK_OK(kvc_prefix_lookup(cache.get(), &bad, &tokens));
  CHECK(tokens == 0);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  KVT_CHECK_ERR(kvc_prefix_attach(cache.get(), 0, &prefix, &tokens), KVC_ERR_ALREADY_EXISTS);
  CHECK(kvt::get_stats(cache.get()).prefix_hits == 0);
  CHECK(kvt::get_stats(cache.get()).sequences == 1);

  // Parameters that cannot work are refused at creation.
  const auto refused = [&](kvc_cache_params p, kvc_status_code code, const char* words) {
    kvc_cache* made = nullptr;
    Status s(kvc_cache_create(ctx.get(), &p, &made));
    CHECK(s.code() == code);
    CHECK(kvt::contains(s.message(), words));
    CHECK(made == nullptr);
  };
  kvc_cache_params p = params(true);
  p.layout = KVC_LAYOUT_CONTIGUOUS;
  refused(p, KVC_ERR_INVALID_ARGUMENT, "paged");
  p = params(true);
  p.prefix_write_through = 1;
  refused(p, KVC_ERR_INVALID_ARGUMENT, "store");
  p = params(false);
  p.prefix_store = "mem";
  refused(p, KVC_ERR_INVALID_ARGUMENT, "enabled");
  p = params(true);
  p.prefix_store = "nowhere";
  refused(p, KVC_ERR_NOT_FOUND, "nowhere");
}

TEST_CASE("prefix cache: YAML prefix_cache section") {
  kvt::ContextPtr ctx = kvt::make_context("stores:\n  mem: { plugin: host }\n");
  kvc_cache* made = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(
      ctx.get(),
      "cache: { layers: 2, head_dim: 16 }\nprefix_cache: { enabled: true, store: mem, write_through: true }\n",
      &made));
  kvt::CachePtr cache(made);
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  KVT_REQUIRE_OK(kvc_cache_get_params(cache.get(), &p));
  CHECK(p.prefix_cache == 1);
  CHECK(p.prefix_write_through == 1);
  REQUIRE(p.prefix_store != nullptr);
  CHECK(std::string(p.prefix_store) == "mem");
  made = nullptr;
  Status s(kvc_cache_create_from_yaml(ctx.get(), "prefix_cache: { enabled: yes please }\n", &made));
  CHECK(s.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(s.message(), "prefix_cache.enabled"));
  Status contiguous(kvc_cache_create_from_yaml(
      ctx.get(), "cache: { layout: contiguous }\nprefix_cache: { enabled: true }\n", &made));
  CHECK(contiguous.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(contiguous.message(), "paged"));
}

TEST_CASE("prefix cache: a write to a block only the cache shares is not OUT_OF_MEMORY when the live sequence fits") {
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t node = node_bytes(ctx.get(), params(false));
  // Room for exactly the publisher's two blocks on every head: no spare block for a copy.
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(true, 2 * node));
  const std::vector<int32_t> ids = prompt(2 * kBlock, 30);
  prefill_and_publish(cache.get(), 0, ids);
  KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), 0, kBlock + 4));
  // Without the cache's hold the append writes the truncated block in place; with it the
  // block is copied first, and the cache gives it up when the copy does not fit.
  std::vector<int32_t> other = ids;
  other[kBlock + 4] += 1;
  std::vector<float> out;
  CHECK(try_feed(cache.get(), 0, chunk_of(other, kBlock + 4, kBlock + 5), out));
  kvc_cache_stats s = kvt::get_stats(cache.get());
  CHECK(s.bytes_used <= s.bytes_limit);
  CHECK(s.bytes_cached == 0);
  CHECK(kvt::stored_positions(cache.get(), 0, 1, 1).size() == kBlock + 5);
  // The first block is still findable; the second, rewritten, is not.
  CHECK(lookup(cache.get(), ids) == kBlock);
  // Once the sequence is gone the first block is a cached leaf, given back when needed.
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 0));
  CHECK(kvt::get_stats(cache.get()).bytes_cached == node);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 1));
  feed(cache.get(), 1, chunk_of(prompt(2 * kBlock, 36), 0, 2 * kBlock));
  CHECK(kvt::get_stats(cache.get()).bytes_cached == 0);
  CHECK(lookup(cache.get(), ids) == 0);

  // A compression that moves tokens into the published blocks, likewise.
  kvc_cache_params p = params(true, 2 * node);
  p.policy = "streaming";
  p.sinks = 4;
  p.recent = 4;
  p.budget = 8;
  kvt::CachePtr compressing = kvt::make_cache(ctx.get(), p);
  prefill_and_publish(compressing.get(), 0, ids);
  const int32_t zero = 0;
  KVT_REQUIRE_OK(kvc_compress(compressing.get(), -1, 1, &zero));
  s = kvt::get_stats(compressing.get());
  CHECK(s.bytes_used <= s.bytes_limit);
  CHECK(kvt::stored_positions(compressing.get(), 0, 1, 1).size() == 8);
  CHECK(lookup(compressing.get(), ids) == 0);
}

TEST_CASE("prefix cache: a \"once\" compression of a published prompt fits where the live sequence fits") {
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t node = node_bytes(ctx.get(), params(false));
  kvc_cache_params p = once_streaming_params(2 * node);
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  const std::vector<int32_t> ids = prompt(2 * kBlock + 1, 31);
  prefill_and_publish(cache.get(), 0, std::vector<int32_t>(ids.begin(), ids.end() - 1));
  // The first decode token compresses the prompt first: the sinks' block is rewritten.
  std::vector<float> out;
  CHECK(try_feed(cache.get(), 0, chunk_of(ids, 2 * kBlock, 2 * kBlock + 1), out));
  const kvc_cache_stats s = kvt::get_stats(cache.get());
  CHECK(s.bytes_used <= s.bytes_limit);
  CHECK(kvt::stored_positions(cache.get(), 0, 1, 1).size() == 9);
}

TEST_CASE("prefix cache: a block published under two keys is counted once and given back once") {
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t node = node_bytes(ctx.get(), params(false));
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), params(true, 4 * node));
  const std::vector<int32_t> ids = prompt(2 * kBlock, 32);
  prefill_and_publish(cache.get(), 0, ids);
  // The same blocks, findable under another model's keys too.
  kvc_prefix other = prefix_of(ids);
  other.model = "another-model";
  int32_t tokens = -1;
  KVT_REQUIRE_OK(kvc_prefix_publish(cache.get(), 0, &other, &tokens));
  CHECK(tokens == 2 * kBlock);
  CHECK(kvt::get_stats(cache.get()).bytes_shared == 0);
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 0));
  kvc_cache_stats s = kvt::get_stats(cache.get());
  CHECK(s.bytes_shared == 0);
  CHECK(s.bytes_cached == 2 * node);
  CHECK(s.bytes_used == s.bytes_cached);
  // A sequence needing the whole limit makes the cache give every block back, once.
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 1));
  feed(cache.get(), 1, chunk_of(prompt(4 * kBlock, 33), 0, 4 * kBlock));
  s = kvt::get_stats(cache.get());
  CHECK(s.bytes_cached == 0);
  CHECK(s.bytes_shared == 0);
  CHECK(s.bytes_used == 4 * node);
  CHECK(lookup(cache.get(), ids) == 0);
  CHECK(attach(cache.get(), 2, ids) == 0);
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 1));
  CHECK(kvt::get_stats(cache.get()).bytes_used == 0);
}

TEST_CASE("prefix cache: random calls keep every sequence as a cache without it stores it, and the counters exact") {
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t node = node_bytes(ctx.get(), params(false));
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int32_t n) { return static_cast<int32_t>(rng() % static_cast<uint32_t>(n)); };
    kvc_cache_params p = params(true, 26 * node);
    p.policy = "streaming";
    p.sinks = 4 + pick(2) * 4;
    p.recent = 8;
    p.budget = 24;
    p.prefill = pick(2) ? KVC_PREFILL_ONCE : KVC_PREFILL_NONE;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    p.prefix_cache = 0;
    p.memory_limit = size_t{64} << 20;
    kvt::CachePtr reference = kvt::make_cache(ctx.get(), p);
    struct Live {
      std::vector<int32_t> ids;  // by position
      int32_t next = 0;          // the next position to append
    };
    std::map<int32_t, Live> live;
    int32_t next_id = 0;
    const std::vector<int32_t> bases[] = {prompt(40, 50), prompt(40, 51)};
    auto both = [&](auto&& call) {
      KVT_REQUIRE_OK(call(cache.get()));
      KVT_REQUIRE_OK(call(reference.get()));
    };
    auto append = [&](int32_t seq, Live& l, int32_t n) {
      while (static_cast<int32_t>(l.ids.size()) < l.next + n) l.ids.push_back(pick(30000));
      const Chunk c = chunk_of(l.ids, l.next, l.next + n);
      std::vector<float> a, b;
      REQUIRE(try_feed(cache.get(), seq, c, a));
      REQUIRE(try_feed(reference.get(), seq, c, b));
      CHECK(a == b);
      l.next += n;
    };
    for (int step = 0; step < 60; ++step) {
      CAPTURE(step);
      const int op = pick(9);
      if (live.empty() || (op == 0 && live.size() < 4)) {
        Live l;
        const std::vector<int32_t>& base = bases[pick(2)];
        l.ids.assign(base.begin(), base.begin() + 8 + pick(33));
        const int32_t seq = next_id++;
        const int32_t got = attach(cache.get(), seq, l.ids);
        KVT_REQUIRE_OK(kvc_seq_create(reference.get(), seq));
        if (got > 0) feed(reference.get(), seq, chunk_of(l.ids, 0, got));
        l.next = got;
        const int32_t rest = static_cast<int32_t>(l.ids.size()) - got;
        if (rest > 0) append(seq, l, rest);
        live[seq] = l;
        continue;
      }
      auto it = live.begin();
      std::advance(it, pick(static_cast<int32_t>(live.size())));
      const int32_t seq = it->first;
      Live& l = it->second;
      switch (op) {
        case 1: append(seq, l, 1); break;
        case 2: {
          if (live.size() >= 4) break;
          const int32_t to = next_id++;
          both([&](kvc_cache* c) { return kvc_seq_fork(c, seq, to); });
          live[to] = l;
          break;
        }
        case 3: {
          const int32_t at = pick(l.next + 1);
          both([&](kvc_cache* c) { return kvc_seq_truncate(c, seq, at); });
          l.ids.resize(static_cast<size_t>(at));
          l.next = std::min(l.next, at);
          break;
        }
        case 4: {
          const int32_t first = pick(l.next + 1);
          const int32_t end = first + pick(l.next - first + 1);
          both([&](kvc_cache* c) { return kvc_seq_remove_range(c, seq, first, end); });
          break;
        }
        case 5: both([&](kvc_cache* c) { return kvc_compress(c, -1, 1, &seq); }); break;
        case 6: {
          // Mostly this model's keys; sometimes another's, which finds the same blocks.
          kvc_prefix prefix = prefix_of(l.ids, l.next);
          if (pick(4) == 0) prefix.model = "another-model";
          int32_t tokens = -1;
          KVT_REQUIRE_OK(kvc_prefix_publish(cache.get(), seq, &prefix, &tokens));
          break;
        }
        case 7: {
          both([&](kvc_cache* c) { return kvc_seq_remove(c, seq); });
          live.erase(it);
          break;
        }
        case 8: {
          if (live.size() >= 4) break;
          const int32_t to = next_id++;
          for (kvc_cache* c : {cache.get(), reference.get()}) {
            const std::vector<uint8_t> bytes = kvt::export_bytes(c, seq);
            KVT_REQUIRE_OK(kvc_seq_import(c, to, bytes.data(), bytes.size()));
          }
          live[to] = l;
          break;
        }
        default: append(seq, l, 1 + pick(9)); break;
      }
      for (const auto& entry : live) {
        CAPTURE(entry.first);
        REQUIRE(kvt::stored_bytes(cache.get(), entry.first) ==
                kvt::stored_bytes(reference.get(), entry.first));
      }
      const kvc_cache_stats s = kvt::get_stats(cache.get());
      const kvc_cache_stats r = kvt::get_stats(reference.get());
      REQUIRE(s.bytes_used <= s.bytes_limit);
      REQUIRE(s.bytes_cached + s.bytes_shared <= s.bytes_used);
      REQUIRE(s.bytes_used == s.blocks_used * (node / (kLayers * kKvHeads)));
      REQUIRE(s.tokens_stored == r.tokens_stored);
    }
    for (const auto& entry : live) {
      both([&](kvc_cache* c) { return kvc_seq_remove(c, entry.first); });
    }
    const kvc_cache_stats s = kvt::get_stats(cache.get());
    CHECK(s.bytes_used == s.bytes_cached);
    CHECK(s.bytes_shared == 0);
    // Every cached block is given back to a sequence that needs the whole limit.
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), next_id));
    feed(cache.get(), next_id, chunk_of(prompt(26 * kBlock, 52), 0, 26 * kBlock));
    CHECK(kvt::get_stats(cache.get()).bytes_used == 26 * node);
    CHECK(kvt::get_stats(cache.get()).bytes_cached == 0);
  }
}

TEST_CASE("prefix cache: a failed append after a \"once\" compression of a published prompt leaves it as it was") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_FAULT_PLUGIN));
  const size_t node = node_bytes(ctx.get(), params(false));
  for (const size_t limit : {2 * node, 8 * node}) {
    CAPTURE(limit);
    kvc_cache_params p = once_streaming_params(limit);
    p.backend = "fault";
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    const std::vector<int32_t> ids = prompt(2 * kBlock + 1, 34);
    prefill_and_publish(cache.get(), 0, std::vector<int32_t>(ids.begin(), ids.end() - 1));
    const std::vector<unsigned char> before = kvt::stored_bytes(cache.get(), 0);
    // The attention after the compression and the append fails: both are undone.
    void* handle = dlopen(KVC_TEST_FAULT_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(handle != nullptr);
    auto arm = reinterpret_cast<void (*)(int, long, int32_t, const char*)>(dlsym(handle, "kvc_fault_arm"));
    const bool found = arm != nullptr;
    REQUIRE(found);
    arm(2 /* attend */, 1, KVC_ERR_PLUGIN, "injected fault");
    std::vector<float> out;
    CHECK_FALSE(try_feed(cache.get(), 0, chunk_of(ids, 2 * kBlock, 2 * kBlock + 1), out));
    arm(2, 0, KVC_ERR_PLUGIN, "disarmed");
    dlclose(handle);
    CHECK(kvt::stored_bytes(cache.get(), 0) == before);
    const kvc_cache_stats s = kvt::get_stats(cache.get());
    CHECK(s.bytes_used <= s.bytes_limit);
    CHECK(s.bytes_cached + s.bytes_shared <= s.bytes_used);
    // Retried, it succeeds.
    CHECK(try_feed(cache.get(), 0, chunk_of(ids, 2 * kBlock, 2 * kBlock + 1), out));
    CHECK(kvt::stored_positions(cache.get(), 0, 1, 1).size() == 9);
  }
}

TEST_CASE("prefix cache: an attach continues its cached run with the store's chunks after it") {
  kvt::ContextPtr ctx = kvt::make_context("stores:\n  mem: { plugin: host }\n");
  kvt::CachePtr first = store_cache(ctx.get(), true);
  kvt::CachePtr second = store_cache(ctx.get(), false);
  kvt::CachePtr plain = kvt::make_cache(ctx.get(), params(false));
  const std::vector<int32_t> ids = prompt(3 * kBlock, 35);
  prefill_and_publish(first.get(), 0, ids);
  // The reader has the first block cached itself; the store has all three.
  prefill_and_publish(second.get(), 0, std::vector<int32_t>(ids.begin(), ids.begin() + kBlock));
  KVT_REQUIRE_OK(kvc_seq_remove(second.get(), 0));
  CHECK(lookup(second.get(), ids) == kBlock);
  CHECK(attach(second.get(), 1, ids) == 3 * kBlock);
  KVT_REQUIRE_OK(kvc_seq_create(plain.get(), 1));
  feed(plain.get(), 1, chunk_of(ids, 0, 3 * kBlock));
  CHECK(kvt::stored_bytes(second.get(), 1) == kvt::stored_bytes(plain.get(), 1));
  CHECK(lookup(second.get(), ids) == 3 * kBlock);
  KVT_REQUIRE_OK(kvc_seq_remove(second.get(), 1));
  const kvc_cache_stats s = kvt::get_stats(second.get());
  CHECK(s.bytes_used == s.bytes_cached);
  CHECK(s.bytes_shared == 0);
  CHECK(s.blocks_used == 3u * kLayers * kKvHeads);
}
