// The prefix cache through the C API: an attached prefix gives the attention of a full
// prefill bit for bit, cached blocks outlive their sequences and are reclaimed least recently
// used first (leaves first) exactly when memory is needed, compression never changes a shared
// block, the prefix store continues and takes what the cache publishes, and misuse is refused.
#include <algorithm>
#include <cstring>
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

