// Stores through the C API: offload and restore of a sequence (bit for bit, nothing changed on
// a failed put), drop, and prefix sharing (keys as docs/stores.md gives them, computed here
// with OpenSSL independently of the library; the longest shared prefix; refusals; a restored
// prefix then the rest's prefill equal to a full prefill). Stores: the test store plugin
// (tests/plugins/test_store.c: shared per `space` within the process, with injected faults),
// and the built-in host and disk stores.
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host_reads.hpp"
#include "test_support.hpp"

namespace {

using kvt::Status;

constexpr int32_t kLayers = 2, kKvHeads = 2, kQHeads = 4, kHeadDim = 16;
constexpr int32_t kChunk = 8;

struct Shape {
  kvc_layout layout = KVC_LAYOUT_PAGED;
  kvc_dtype dtype = KVC_DTYPE_F16;
  const char* policy = "h2o";  // tracks attn_sum; budget large enough that nothing is evicted
};

// A context with the test store plugin and stores named by `stores_yaml` (a `stores:` body).
kvt::ContextPtr store_context(const std::string& stores_yaml) {
  const std::string yaml = "plugins:\n  paths: [\"" KVC_TEST_STORE_PLUGIN "\"]\nstores:\n" +
                           stores_yaml;
  return kvt::make_context(yaml.c_str());
}

kvt::CachePtr make_cache(kvc_context* ctx, const Shape& s, size_t memory_limit = size_t{64} << 20) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = s.dtype;
  p.layout = s.layout;
  p.block_tokens = 4;
  p.memory_limit = memory_limit;
  if (s.policy) {
    p.policy = s.policy;
    p.budget = 1000;
  }
  return kvt::make_cache(ctx, p);
}

// The suite's shape with a policy that evicts past `budget` tokens.
kvc_cache_params budgeted_params(const char* policy, int32_t budget) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.policy = policy;
  p.budget = budget;
  return p;
}

// The Q, K and V of tokens, the same for every sequence fed the same token ids.
struct Tokens {
  std::vector<float> q, k, v;
  std::vector<int32_t> pos;
};

Tokens tokens_for(const std::vector<int32_t>& ids, int32_t first_pos) {
  Tokens t;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::mt19937 rng(static_cast<uint32_t>(ids[i]) * 7919u + static_cast<uint32_t>(first_pos + i));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int32_t j = 0; j < kQHeads * kHeadDim; ++j) t.q.push_back(u(rng));
    for (int32_t j = 0; j < kKvHeads * kHeadDim; ++j) t.k.push_back(u(rng));
    for (int32_t j = 0; j < kKvHeads * kHeadDim; ++j) t.v.push_back(u(rng));
    t.pos.push_back(first_pos + static_cast<int32_t>(i));
  }
  return t;
}

// append_attend of the tokens on every layer; the outputs of all layers, as bytes.
std::vector<unsigned char> feed(kvc_cache* cache, int32_t seq, const Tokens& t) {
  const int32_t n = static_cast<int32_t>(t.pos.size());
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, t.pos.data());
  std::vector<unsigned char> all;
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    std::vector<float> out(t.q.size());
    const kvc_tensor q = kvt::tensor(t.q.data(), KVC_DTYPE_F32);
    const kvc_tensor k = kvt::tensor(t.k.data(), KVC_DTYPE_F32);
    const kvc_tensor v = kvt::tensor(t.v.data(), KVC_DTYPE_F32);
    kvc_tensor_mut o = kvt::tensor_mut(out.data());
    KVT_REQUIRE_OK(kvc_append_attend(cache, layer, &batch, &q, &k, &v, nullptr, &o));
    const auto* bytes = reinterpret_cast<const unsigned char*>(out.data());
    all.insert(all.end(), bytes, bytes + out.size() * sizeof(float));
  }
  return all;
}

std::vector<unsigned char> feed_ids(kvc_cache* cache, int32_t seq, const std::vector<int32_t>& ids,
                                    int32_t first, int32_t end) {
  const std::vector<int32_t> part(ids.begin() + first, ids.begin() + end);
  return feed(cache, seq, tokens_for(part, first));
}

std::vector<unsigned char> export_bytes(kvc_cache* cache, int32_t seq) {
  size_t size = 0;
  KVT_REQUIRE_OK(kvc_seq_export_size(cache, seq, &size));
  std::vector<unsigned char> bytes(size);
  size_t written = 0;
  KVT_REQUIRE_OK(kvc_seq_export(cache, seq, bytes.data(), bytes.size(), &written));
  return bytes;
}

bool has_sequence(kvc_cache* cache, int32_t seq) {
  int32_t n = 0;
  Status st{kvc_seq_length(cache, seq, 0, 0, &n)};
  return st.ok();
}

std::vector<int32_t> prompt(size_t n, int32_t seed) {
  std::vector<int32_t> ids(n);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 32000u);
  return ids;
}

kvc_prefix prefix_of(const std::vector<int32_t>& ids, const char* model = "model-a") {
  kvc_prefix p;
  kvc_prefix_init(&p, model, ids.data(), static_cast<int32_t>(ids.size()));
  p.chunk_tokens = kChunk;
  return p;
}

// docs/stores.md, "Prefix keys", written out again from the document.
template <class U>
void put_le(std::vector<unsigned char>& out, U x) {
  for (size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<unsigned char>(x >> (8 * i)));
}

std::string reference_key(const std::string& model, kvc_dtype dtype, uint32_t stats,
                          int32_t chunk_tokens, const std::vector<int32_t>& ids, int32_t chunk,
                          kvc_rotation k_rotation = KVC_ROTATION_NONE) {
  std::vector<unsigned char> m = {'K', 'V', 'C', 'P', 'F', 'X', 0, 1};
  put_le<uint64_t>(m, model.size());
  m.insert(m.end(), model.begin(), model.end());
  for (int32_t x : {kLayers, kKvHeads, kQHeads, kHeadDim}) put_le<uint32_t>(m, static_cast<uint32_t>(x));
  put_le<uint32_t>(m, static_cast<uint32_t>(dtype));
  if (k_rotation != KVC_ROTATION_NONE) {
    m.insert(m.end(), {'R', 'O', 'T', 0});
    put_le<uint32_t>(m, static_cast<uint32_t>(k_rotation));
  }
  put_le<uint32_t>(m, stats);
  put_le<uint32_t>(m, static_cast<uint32_t>(chunk_tokens));
  for (int32_t i = 0; i < (chunk + 1) * chunk_tokens; ++i) {
    put_le<uint32_t>(m, static_cast<uint32_t>(ids[static_cast<size_t>(i)]));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  REQUIRE(EVP_Digest(m.data(), m.size(), digest, &length, EVP_sha256(), nullptr) == 1);
  std::string key = "kvc-prefix-";
  static const char* hex = "0123456789abcdef";
  for (unsigned int i = 0; i < length; ++i) {
    key += hex[digest[i] >> 4];
    key += hex[digest[i] & 15];
  }
  return key;
}

}  // namespace

TEST_CASE("stores: offload then restore is bit-exact, both layouts, f16 and f32") {
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    for (kvc_dtype dtype : {KVC_DTYPE_F16, KVC_DTYPE_F32}) {
      CAPTURE(layout);
      CAPTURE(dtype);
      const Shape shape{layout, dtype, "h2o"};
      kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: offload } }\n");
      kvt::CachePtr cache = make_cache(ctx.get(), shape);
      kvt::CachePtr reference = make_cache(ctx.get(), shape);
      const std::vector<int32_t> ids = prompt(30, 1);
      for (kvc_cache* c : {cache.get(), reference.get()}) {
        KVT_REQUIRE_OK(kvc_seq_create(c, 0));
        feed_ids(c, 0, ids, 0, 21);
        feed_ids(c, 0, ids, 21, 22);  // a decode step: statistics and counters move on
      }
      const std::vector<unsigned char> image = export_bytes(cache.get(), 0);
      const kvc_cache_stats empty_before = kvt::get_stats(reference.get());

      KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "mem", "seq-0"));
      CHECK_FALSE(has_sequence(cache.get(), 0));
      CHECK(kvt::get_stats(cache.get()).tokens_stored == 0);
      CHECK(kvt::get_stats(cache.get()).bytes_used == 0);
      KVT_REQUIRE_OK(kvc_seq_restore(cache.get(), 0, "mem", "seq-0"));
      CHECK(export_bytes(cache.get(), 0) == image);
      CHECK(kvt::stored_bytes(cache.get(), 0) == kvt::stored_bytes(reference.get(), 0));
      CHECK(kvt::stats_equal(kvt::get_stats(reference.get()), empty_before));
      // The value stays: a second restore under another id holds the same.
      KVT_REQUIRE_OK(kvc_seq_restore(cache.get(), 5, "mem", "seq-0"));
      CHECK(export_bytes(cache.get(), 5) == image);
      // Later tokens attend the same way as in the cache that never offloaded.
      for (int32_t at = 22; at < 30; ++at) {
        const std::vector<unsigned char> expected = feed_ids(reference.get(), 0, ids, at, at + 1);
        CHECK(feed_ids(cache.get(), 0, ids, at, at + 1) == expected);
        CHECK(feed_ids(cache.get(), 5, ids, at, at + 1) == expected);
      }
      KVT_CHECK_OK(kvc_store_drop(ctx.get(), "mem", "seq-0"));
    }
  }
}

TEST_CASE("stores: a failed put leaves the sequence and the stats as they were") {
  kvt::ContextPtr ctx =
      store_context("  broken: { plugin: test_store, params: { space: broken, fail: put } }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  const std::vector<int32_t> ids = prompt(12, 2);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, ids, 0, 12);
  const std::vector<unsigned char> image = export_bytes(cache.get(), 0);
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  Status st{kvc_seq_offload(cache.get(), 0, "broken", "k")};
  CHECK(st.code() == KVC_ERR_IO);
  CHECK(kvt::contains(st.message(), "store 'broken' (plugin 'test_store')"));
  CHECK(kvt::contains(st.message(), "injected put failure"));
  CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
  CHECK(export_bytes(cache.get(), 0) == image);
  // Nothing was stored either.
  KVT_CHECK_ERR(kvc_seq_restore(cache.get(), 1, "broken", "k"), KVC_ERR_NOT_FOUND);
}

TEST_CASE("stores: restoring a missing key is NOT_FOUND and creates nothing; drop") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: missing } }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  Status st{kvc_seq_restore(cache.get(), 0, "mem", "nothing-here")};
  CHECK(st.code() == KVC_ERR_NOT_FOUND);
  CHECK(kvt::contains(st.message(), "'nothing-here'"));
  CHECK_FALSE(has_sequence(cache.get(), 0));
  CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));

  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, prompt(5, 3), 0, 5);
  KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "mem", "k"));
  KVT_CHECK_OK(kvc_store_drop(ctx.get(), "mem", "k"));
  KVT_CHECK_ERR(kvc_store_drop(ctx.get(), "mem", "k"), KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_seq_restore(cache.get(), 0, "mem", "k"), KVC_ERR_NOT_FOUND);

  Status unknown{kvc_seq_restore(cache.get(), 0, "elsewhere", "k")};
  CHECK(unknown.code() == KVC_ERR_NOT_FOUND);
  CHECK(kvt::contains(unknown.message(), "'elsewhere'"));
  CHECK(kvt::contains(unknown.message(), "'mem'"));
}

TEST_CASE("stores: restore into an id in use is ALREADY_EXISTS before the store is asked") {
  kvt::ContextPtr ctx =
      store_context("  mem: { plugin: test_store, params: { space: in_use, fail: get } }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  KVT_CHECK_ERR(kvc_seq_restore(cache.get(), 0, "mem", "k"), KVC_ERR_ALREADY_EXISTS);
  const std::vector<int32_t> ids = prompt(16, 4);
  kvc_prefix p = prefix_of(ids);
  int32_t restored = -1;
  KVT_CHECK_ERR(kvc_prefix_load(cache.get(), 0, "mem", &p, &restored), KVC_ERR_ALREADY_EXISTS);
  CHECK(restored == -1);
  // The store is asked otherwise, and its failure (not a missing value) fails the load.
  Status st{kvc_prefix_load(cache.get(), 1, "mem", &p, &restored)};
  CHECK(st.code() == KVC_ERR_IO);
  CHECK(kvt::contains(st.message(), "injected get failure"));
  CHECK_FALSE(has_sequence(cache.get(), 1));
}

TEST_CASE("stores: prefix keys are docs/stores.md's SHA-256, one image of its tokens per chunk") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: keys } }\n");
  for (kvc_dtype dtype : {KVC_DTYPE_F16, KVC_DTYPE_F32}) {
    CAPTURE(dtype);
    kvt::CachePtr cache = make_cache(ctx.get(), Shape{KVC_LAYOUT_PAGED, dtype, "h2o"});
    const std::vector<int32_t> ids = prompt(3 * kChunk + 5, 5);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    feed_ids(cache.get(), 0, ids, 0, static_cast<int32_t>(ids.size()));
    kvc_prefix p = prefix_of(ids);
    int32_t saved = -1;
    KVT_REQUIRE_OK(kvc_prefix_save(cache.get(), 0, "mem", &p, &saved));
    CHECK(saved == 3 * kChunk);
    for (int32_t c = 0; c < 3; ++c) {
      CAPTURE(c);
      const std::string key = reference_key("model-a", dtype, KVC_STAT_KIND_ATTN_SUM, kChunk, ids, c);
      const int32_t id = 10 + c;
      KVT_REQUIRE_OK(kvc_seq_restore(cache.get(), id, "mem", key.c_str()));
      for (int32_t layer = 0; layer < kLayers; ++layer) {
        for (int32_t head = 0; head < kKvHeads; ++head) {
          const std::vector<int32_t> positions = kvt::stored_positions(cache.get(), id, layer, head);
          std::vector<int32_t> expected(kChunk);
          std::iota(expected.begin(), expected.end(), c * kChunk);
          CHECK(positions == expected);
        }
      }
    }
    // No fourth chunk: 5 tokens do not make one.
    const std::vector<int32_t> longer = [&] {
      std::vector<int32_t> l = ids;
      l.resize(4 * kChunk, 7);
      return l;
    }();
    const std::string fourth = reference_key("model-a", dtype, KVC_STAT_KIND_ATTN_SUM, kChunk, longer, 3);
    KVT_CHECK_ERR(kvc_seq_restore(cache.get(), 20, "mem", fourth.c_str()), KVC_ERR_NOT_FOUND);
  }
}

TEST_CASE("stores: a prefix saved in one context loads in another, up to the first difference") {
  // Two contexts of one process share the test store's space; the disk store shares a folder.
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("kvc_test_stores_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  const std::string stores = "  mem: { plugin: test_store, params: { space: across } }\n"
                             "  disk: { plugin: disk, params: { path: \"" + folder.string() +
                             "\", fsync: false } }\n";
  for (const char* store : {"mem", "disk"}) {
    CAPTURE(store);
    kvt::ContextPtr saver_ctx = store_context(stores);
    kvt::ContextPtr loader_ctx = store_context(stores);
    for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
      CAPTURE(layout);
      const Shape shape{layout, KVC_DTYPE_F16, "h2o"};
      kvt::CachePtr saver = make_cache(saver_ctx.get(), shape);
      const std::vector<int32_t> ids = prompt(4 * kChunk + 3, layout == KVC_LAYOUT_PAGED ? 6 : 7);
      KVT_REQUIRE_OK(kvc_seq_create(saver.get(), 0));
      feed_ids(saver.get(), 0, ids, 0, 4 * kChunk + 3);
      kvc_prefix p = prefix_of(ids);
      int32_t saved = -1;
      KVT_REQUIRE_OK(kvc_prefix_save(saver.get(), 0, store, &p, &saved));
      CHECK(saved == 4 * kChunk);

      // The same prompt: all four chunks, the saver's K/V and statistics for them.
      kvt::CachePtr loader = make_cache(loader_ctx.get(), shape);
      int32_t restored = -1;
      KVT_REQUIRE_OK(kvc_prefix_load(loader.get(), 3, store, &p, &restored));
      CHECK(restored == 4 * kChunk);
      for (int32_t layer = 0; layer < kLayers; ++layer) {
        CHECK(kvt::seq_length(loader.get(), 3, layer, 1) == 4 * kChunk);
      }
      kvt::CachePtr truncated = make_cache(saver_ctx.get(), shape);
      KVT_REQUIRE_OK(kvc_seq_create(truncated.get(), 0));
      feed_ids(truncated.get(), 0, ids, 0, 4 * kChunk + 3);
      KVT_REQUIRE_OK(kvc_seq_truncate(truncated.get(), 0, 4 * kChunk));
      CHECK(kvt::stored_bytes(loader.get(), 3) == kvt::stored_bytes(truncated.get(), 0));

      // A prompt differing in chunk 2: chunks 0 and 1 only.
      std::vector<int32_t> other = ids;
      other[2 * kChunk + 3] += 1;
      kvc_prefix q = prefix_of(other);
      KVT_REQUIRE_OK(kvc_prefix_load(loader.get(), 4, store, &q, &restored));
      CHECK(restored == 2 * kChunk);
      CHECK(kvt::seq_length(loader.get(), 4, 1, 0) == 2 * kChunk);
      // A prefix shorter than the saved one: its whole chunks only.
      kvc_prefix shorter = prefix_of(ids);
      shorter.n_tokens = kChunk + kChunk / 2;
      KVT_REQUIRE_OK(kvc_prefix_load(loader.get(), 5, store, &shorter, &restored));
      CHECK(restored == kChunk);
      // Another model, another chunk size, a different first token: nothing, an empty sequence.
      kvc_prefix model_b = prefix_of(ids, "model-b");
      kvc_prefix chunk16 = prefix_of(ids);
      chunk16.chunk_tokens = 2 * kChunk;
      std::vector<int32_t> first = ids;
      first[0] += 1;
      kvc_prefix first_differs = prefix_of(first);
      int32_t id = 6;
      for (kvc_prefix* none : {&model_b, &chunk16, &first_differs}) {
        KVT_REQUIRE_OK(kvc_prefix_load(loader.get(), id, store, none, &restored));
        CHECK(restored == 0);
        CHECK(kvt::seq_length(loader.get(), id, 0, 0) == 0);
        ++id;
      }
    }
  }
  std::filesystem::remove_all(folder);
}

TEST_CASE("stores: caches storing different statistics never share a prefix") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: stats } }\n");
  kvt::CachePtr h2o = make_cache(ctx.get(), Shape{KVC_LAYOUT_PAGED, KVC_DTYPE_F16, "h2o"});
  kvt::CachePtr full = make_cache(ctx.get(), Shape{KVC_LAYOUT_PAGED, KVC_DTYPE_F16, nullptr});
  const std::vector<int32_t> ids = prompt(2 * kChunk, 8);
  KVT_REQUIRE_OK(kvc_seq_create(h2o.get(), 0));
  feed_ids(h2o.get(), 0, ids, 0, 2 * kChunk);
  kvc_prefix p = prefix_of(ids);
  int32_t n = -1;
  KVT_REQUIRE_OK(kvc_prefix_save(h2o.get(), 0, "mem", &p, &n));
  CHECK(n == 2 * kChunk);
  KVT_REQUIRE_OK(kvc_prefix_load(full.get(), 0, "mem", &p, &n));
  CHECK(n == 0);
  KVT_REQUIRE_OK(kvc_prefix_load(h2o.get(), 1, "mem", &p, &n));
  CHECK(n == 2 * kChunk);
}

TEST_CASE("stores: a rotated cache's prefix chunks and offloads carry its rotation") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: rotated } }\n");
  kvc_cache_params params = budgeted_params("h2o", 1000);
  params.backend = "cpu";  // a backend that rotates K
  params.k_rotation = KVC_ROTATION_HADAMARD;
  kvt::CachePtr rotated = kvt::make_cache(ctx.get(), params);
  params.k_rotation = KVC_ROTATION_NONE;
  kvt::CachePtr plain = kvt::make_cache(ctx.get(), params);
  const std::vector<int32_t> ids = prompt(2 * kChunk, 9);
  KVT_REQUIRE_OK(kvc_seq_create(rotated.get(), 0));
  feed_ids(rotated.get(), 0, ids, 0, 2 * kChunk);
  kvc_prefix p = prefix_of(ids);
  int32_t n = -1;
  KVT_REQUIRE_OK(kvc_prefix_save(rotated.get(), 0, "mem", &p, &n));
  CHECK(n == 2 * kChunk);
  // Keys with the rotation after the dtype (docs/stores.md), never an unrotated cache's.
  const std::string key =
      reference_key("model-a", KVC_DTYPE_F16, KVC_STAT_KIND_ATTN_SUM, kChunk, ids, 0,
                    KVC_ROTATION_HADAMARD);
  KVT_REQUIRE_OK(kvc_seq_restore(rotated.get(), 1, "mem", key.c_str()));
  KVT_REQUIRE_OK(kvc_prefix_load(plain.get(), 0, "mem", &p, &n));
  CHECK(n == 0);
  KVT_REQUIRE_OK(kvc_prefix_load(rotated.get(), 2, "mem", &p, &n));
  CHECK(n == 2 * kChunk);
  CHECK(kvt::stored_bytes(rotated.get(), 2) == kvt::stored_bytes(rotated.get(), 0));

  // An offloaded rotated sequence restores into a rotated cache only.
  const std::vector<unsigned char> image = export_bytes(rotated.get(), 0);
  KVT_REQUIRE_OK(kvc_seq_offload(rotated.get(), 0, "mem", "rotated-sequence"));
  Status refused{kvc_seq_restore(plain.get(), 5, "mem", "rotated-sequence")};
  CHECK(refused.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(refused.message(), "store 'mem': the value under 'rotated-sequence'"));
  CHECK(kvt::contains(refused.message(), "k_rotation hadamard"));
  CHECK_FALSE(has_sequence(plain.get(), 5));
  KVT_REQUIRE_OK(kvc_seq_restore(rotated.get(), 0, "mem", "rotated-sequence"));
  CHECK(export_bytes(rotated.get(), 0) == image);
}

TEST_CASE("stores: a compressed head is refused before anything is written") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: compressed } }\n");
  const kvc_cache_params p = budgeted_params("h2o", 12);
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  const std::vector<int32_t> ids = prompt(3 * kChunk, 9);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, ids, 0, 3 * kChunk);
  int32_t seq = 0;
  KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
  kvc_prefix prefix = prefix_of(ids);
  int32_t saved = -1;
  Status st{kvc_prefix_save(cache.get(), 0, "mem", &prefix, &saved)};
  CHECK(st.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(st.message(), "sequence 0 layer 0, kv_head 0"));
  CHECK(saved == -1);
  // Nothing written: a load finds no chunk.
  kvt::CachePtr other = kvt::make_cache(ctx.get(), p);
  int32_t restored = -1;
  KVT_REQUIRE_OK(kvc_prefix_load(other.get(), 0, "mem", &prefix, &restored));
  CHECK(restored == 0);
}

TEST_CASE("stores: a restored prefix then the rest's prefill equals a full prefill") {
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    for (kvc_dtype dtype : {KVC_DTYPE_F16, KVC_DTYPE_F32}) {
      CAPTURE(layout);
      CAPTURE(dtype);
      const Shape shape{layout, dtype, "h2o"};
      kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: rest } }\n");
      const std::vector<int32_t> ids = prompt(5 * kChunk + 6, 10);
      const int32_t shared = 3 * kChunk;
      // The saver prefilled exactly the shared prefix (as an engine does before saving it).
      kvt::CachePtr saver = make_cache(ctx.get(), shape);
      KVT_REQUIRE_OK(kvc_seq_create(saver.get(), 0));
      feed_ids(saver.get(), 0, ids, 0, shared);
      std::vector<int32_t> prefix_ids(ids.begin(), ids.begin() + shared);
      kvc_prefix p = prefix_of(prefix_ids);
      int32_t n = -1;
      KVT_REQUIRE_OK(kvc_prefix_save(saver.get(), 0, "mem", &p, &n));
      REQUIRE(n == shared);

      // Without the store: prefix, then the rest, then decode steps.
      kvt::CachePtr reference = make_cache(ctx.get(), shape);
      KVT_REQUIRE_OK(kvc_seq_create(reference.get(), 0));
      feed_ids(reference.get(), 0, ids, 0, shared);
      const std::vector<unsigned char> rest = feed_ids(reference.get(), 0, ids, shared, 5 * kChunk);
      // With it: the whole prompt's prefix looked up, then the rest prefilled.
      kvt::CachePtr cache = make_cache(ctx.get(), shape);
      kvc_prefix whole = prefix_of(ids);
      KVT_REQUIRE_OK(kvc_prefix_load(cache.get(), 0, "mem", &whole, &n));
      REQUIRE(n == shared);
      CHECK(feed_ids(cache.get(), 0, ids, shared, 5 * kChunk) == rest);
      for (int32_t at = 5 * kChunk; at < static_cast<int32_t>(ids.size()); ++at) {
        CHECK(feed_ids(cache.get(), 0, ids, at, at + 1) == feed_ids(reference.get(), 0, ids, at, at + 1));
      }
      CHECK(kvt::stored_bytes(cache.get(), 0) == kvt::stored_bytes(reference.get(), 0));
    }
  }
}

TEST_CASE("stores: a restored prefix arms 'once' like the prefill it replaces") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: once } }\n");
  kvc_cache_params p = budgeted_params("window", 12);
  p.prefill = KVC_PREFILL_ONCE;
  const std::vector<int32_t> ids = prompt(3 * kChunk + 1, 12);
  const int32_t shared = 3 * kChunk;
  kvt::CachePtr reference = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(reference.get(), 0));
  feed_ids(reference.get(), 0, ids, 0, shared);
  std::vector<int32_t> prefix_ids(ids.begin(), ids.begin() + shared);
  kvc_prefix prefix = prefix_of(prefix_ids);
  int32_t n = -1;
  KVT_REQUIRE_OK(kvc_prefix_save(reference.get(), 0, "mem", &prefix, &n));
  REQUIRE(n == shared);
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_prefix_load(cache.get(), 0, "mem", &prefix, &n));
  REQUIRE(n == shared);
  // The whole prompt came from the store: its first decode token compresses it to the budget
  // first, as it does after a prefill.
  CHECK(feed_ids(cache.get(), 0, ids, shared, shared + 1) ==
        feed_ids(reference.get(), 0, ids, shared, shared + 1));
  CHECK(kvt::seq_length(cache.get(), 0, 0, 0) == 13);
  CHECK(kvt::stored_bytes(cache.get(), 0) == kvt::stored_bytes(reference.get(), 0));
}

TEST_CASE("stores: saving again writes no chunk that is there; a failed put keeps earlier chunks") {
  const std::vector<int32_t> ids = prompt(3 * kChunk, 11);
  kvt::ContextPtr ctx = store_context(
      "  mem: { plugin: test_store, params: { space: resave } }\n"
      "  no_put: { plugin: test_store, params: { space: resave, fail: put } }\n"
      "  second_put_fails: { plugin: test_store, params: { space: partial, fail: put, fail_after: 1 } }\n"
      "  partial: { plugin: test_store, params: { space: partial } }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, ids, 0, 3 * kChunk);
  kvc_prefix p = prefix_of(ids);
  int32_t n = -1;
  KVT_REQUIRE_OK(kvc_prefix_save(cache.get(), 0, "mem", &p, &n));
  // Every chunk is there: the store whose puts fail saves nothing and succeeds.
  n = -1;
  KVT_REQUIRE_OK(kvc_prefix_save(cache.get(), 0, "no_put", &p, &n));
  CHECK(n == 3 * kChunk);

  n = -1;
  Status st{kvc_prefix_save(cache.get(), 0, "second_put_fails", &p, &n)};
  CHECK(st.code() == KVC_ERR_IO);
  CHECK(n == -1);
  KVT_REQUIRE_OK(kvc_prefix_load(cache.get(), 1, "partial", &p, &n));
  CHECK(n == kChunk);
}

TEST_CASE("stores: a chunk that does not hold its tokens fails the load, creating nothing") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: wrong } }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  const std::vector<int32_t> ids = prompt(2 * kChunk, 12);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, ids, 0, 2 * kChunk);
  kvc_prefix p = prefix_of(ids);
  int32_t n = -1;
  KVT_REQUIRE_OK(kvc_prefix_save(cache.get(), 0, "mem", &p, &n));
  // Chunk 1's key now holds chunk 0's image.
  const std::string key0 = reference_key("model-a", KVC_DTYPE_F16, KVC_STAT_KIND_ATTN_SUM, kChunk, ids, 0);
  const std::string key1 = reference_key("model-a", KVC_DTYPE_F16, KVC_STAT_KIND_ATTN_SUM, kChunk, ids, 1);
  KVT_REQUIRE_OK(kvc_seq_restore(cache.get(), 1, "mem", key0.c_str()));
  KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 1, "mem", key1.c_str()));
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  n = -1;
  Status st{kvc_prefix_load(cache.get(), 2, "mem", &p, &n)};
  CHECK(st.code() == KVC_ERR_IO);
  CHECK(kvt::contains(st.message(), "prefix chunk 1"));
  CHECK(kvt::contains(st.message(), key1));
  CHECK(n == -1);
  CHECK_FALSE(has_sequence(cache.get(), 2));
  CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
  // A value that is not a sequence image at all.
  const std::vector<int32_t> garbage_ids = prompt(kChunk, 13);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 3));
  feed_ids(cache.get(), 3, garbage_ids, 0, 1);
  const std::string garbage_key =
      reference_key("model-a", KVC_DTYPE_F16, KVC_STAT_KIND_ATTN_SUM, kChunk, garbage_ids, 0);
  KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 3, "mem", garbage_key.c_str()));
  kvc_prefix g = prefix_of(garbage_ids);
  KVT_CHECK_ERR(kvc_prefix_load(cache.get(), 2, "mem", &g, &n), KVC_ERR_IO);
  CHECK_FALSE(has_sequence(cache.get(), 2));
}

TEST_CASE("stores: a prefix load past the memory limit is OUT_OF_MEMORY, creating nothing") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: limit } }\n");
  kvt::CachePtr big = make_cache(ctx.get(), Shape{});
  const std::vector<int32_t> ids = prompt(4 * kChunk, 14);
  KVT_REQUIRE_OK(kvc_seq_create(big.get(), 0));
  feed_ids(big.get(), 0, ids, 0, 4 * kChunk);
  kvc_prefix p = prefix_of(ids);
  int32_t n = -1;
  KVT_REQUIRE_OK(kvc_prefix_save(big.get(), 0, "mem", &p, &n));
  const size_t needed = kvt::get_stats(big.get()).bytes_used;
  kvt::CachePtr small = make_cache(ctx.get(), Shape{}, needed / 2);
  const kvc_cache_stats before = kvt::get_stats(small.get());
  n = -1;
  KVT_CHECK_ERR(kvc_prefix_load(small.get(), 0, "mem", &p, &n), KVC_ERR_OUT_OF_MEMORY);
  CHECK(n == -1);
  CHECK_FALSE(has_sequence(small.get(), 0));
  CHECK(kvt::stats_equal(kvt::get_stats(small.get()), before));
}

TEST_CASE("stores: a cache's YAML may repeat the context's stores but not change them") {
  const std::string stores = "  mem: { plugin: test_store, params: { space: yaml } }\n";
  kvt::ContextPtr ctx = store_context(stores);
  const std::string same = "plugins:\n  paths: [\"" KVC_TEST_STORE_PLUGIN "\"]\nstores:\n" + stores;
  kvc_cache* cache = nullptr;
  KVT_CHECK_OK(kvc_cache_create_from_yaml(ctx.get(), same.c_str(), &cache));
  kvc_cache_destroy(cache);
  cache = nullptr;
  const std::string other = "stores:\n  mem: { plugin: test_store, params: { space: other } }\n";
  Status st{kvc_cache_create_from_yaml(ctx.get(), other.c_str(), &cache)};
  CHECK(st.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(st.message(), "stores"));
  CHECK(cache == nullptr);
}

TEST_CASE("stores: a store plugin that is not loaded, or whose create fails, fails the context") {
  kvc_context* ctx = nullptr;
  Status missing{kvc_context_create("stores:\n  s: { plugin: no_such_store }\n", &ctx)};
  CHECK(missing.code() == KVC_ERR_NOT_FOUND);
  CHECK(kvt::contains(missing.message(), "'no_such_store'"));
  CHECK(kvt::contains(missing.message(), "host"));  // the loaded store plugins are listed
  CHECK(ctx == nullptr);
  const std::string bad = "plugins:\n  paths: [\"" KVC_TEST_STORE_PLUGIN
                          "\"]\nstores:\n  s: { plugin: test_store, params: { fail: sometimes } }\n";
  Status refused{kvc_context_create(bad.c_str(), &ctx)};
  CHECK(refused.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(refused.message(), "store 's' (plugin 'test_store')"));
  CHECK(ctx == nullptr);
}

TEST_CASE("stores: store plugins are listed as kind 3; an older ABI or a missing entry is refused") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_STORE_PLUGIN));
  bool listed = false;
  for (size_t i = 0; i < kvc_context_plugin_count(ctx.get()); ++i) {
    kvc_plugin_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    KVT_REQUIRE_OK(kvc_context_plugin_info(ctx.get(), i, &info));
    if (std::string(info.name) == "test_store") {
      listed = true;
      CHECK(info.kind == KVC_PLUGIN_STORE);
      CHECK(std::string(info.path) == KVC_TEST_STORE_PLUGIN);
    }
  }
  CHECK(listed);
  const size_t count = kvc_context_plugin_count(ctx.get());
  Status old{kvc_context_load_plugin(ctx.get(), KVC_TEST_STORE_OLD_ABI_PLUGIN)};
  CHECK(old.code() == KVC_ERR_PLUGIN);
  CHECK(kvt::contains(old.message(), KVC_TEST_STORE_OLD_ABI_PLUGIN));
  CHECK(kvt::contains(old.message(), "'old_abi_store'"));
  CHECK(kvt::contains(old.message(), "ABI 1.1"));
  CHECK(kvt::contains(old.message(), "ABI 1.2"));
  Status lacking{kvc_context_load_plugin(ctx.get(), KVC_TEST_STORE_NO_EXISTS_PLUGIN)};
  CHECK(lacking.code() == KVC_ERR_PLUGIN);
  CHECK(kvt::contains(lacking.message(), "'no_exists_store' lacks required function 'exists'"));
  Status short_vtable{kvc_context_load_plugin(ctx.get(), KVC_TEST_STORE_SHORT_PLUGIN)};
  CHECK(short_vtable.code() == KVC_ERR_PLUGIN);
  CHECK(kvt::contains(short_vtable.message(), "the vtable of plugin 'short_store' of 48 bytes is "
                                              "smaller than ABI 1.2's 56"));
  CHECK(kvc_context_plugin_count(ctx.get()) == count);
}

TEST_CASE("stores: prefix saves and drops run concurrently with decoding on other sequences") {
  // kvcache.h: calls naming disjoint sequences may run concurrently (creating and removing
  // sequences needs exclusive access, so restores and loads are checked afterwards).
  kvt::ContextPtr ctx = store_context("  host: { plugin: host }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  constexpr int kThreads = 4, kRounds = 10;
  std::vector<std::vector<int32_t>> prompts;
  for (int t = 0; t < kThreads; ++t) {
    prompts.push_back(prompt(2 * kChunk + kRounds, 30 + t));
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), t));
    feed_ids(cache.get(), t, prompts.back(), 0, 2 * kChunk);
    KVT_REQUIRE_OK(kvc_seq_fork(cache.get(), t, 10 + t));
    KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 10 + t, "host", ("thread-" + std::to_string(t)).c_str()));
  }
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string& failure = failures[static_cast<size_t>(t)];
      const std::vector<int32_t>& ids = prompts[static_cast<size_t>(t)];
      kvc_prefix p = prefix_of(ids);
      p.n_tokens = 2 * kChunk;
      for (int round = 0; round < kRounds && failure.empty(); ++round) {
        int32_t saved = -1;
        Status save{kvc_prefix_save(cache.get(), t, "host", &p, &saved)};
        if (!save.ok() || saved != 2 * kChunk) failure = "save: " + save.describe();
        // A decode step of this sequence between saves (the positions the saves skip).
        const int32_t at = 2 * kChunk + round;
        const std::vector<int32_t> step(ids.begin() + at, ids.begin() + at + 1);
        const Tokens tokens = tokens_for(step, at);
        const int32_t seq = t, one = 1;
        kvc_batch batch;
        kvc_batch_init(&batch, 1, &seq, &one, tokens.pos.data());
        const kvc_tensor k = kvt::tensor(tokens.k.data(), KVC_DTYPE_F32);
        const kvc_tensor v = kvt::tensor(tokens.v.data(), KVC_DTYPE_F32);
        for (int32_t layer = 0; layer < kLayers && failure.empty(); ++layer) {
          Status append{kvc_append(cache.get(), layer, &batch, &k, &v)};
          if (!append.ok()) failure = "append: " + append.describe();
        }
      }
      const std::string key = "thread-" + std::to_string(t);
      Status drop{kvc_store_drop(ctx.get(), "host", key.c_str())};
      if (!drop.ok()) failure = "drop: " + drop.describe();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(failures[static_cast<size_t>(t)] == "");
    KVT_CHECK_ERR(kvc_seq_restore(cache.get(), 10 + t, "host", ("thread-" + std::to_string(t)).c_str()),
                  KVC_ERR_NOT_FOUND);
    kvc_prefix p = prefix_of(prompts[static_cast<size_t>(t)]);
    int32_t restored = -1;
    KVT_REQUIRE_OK(kvc_prefix_load(cache.get(), 20 + t, "host", &p, &restored));
    CHECK(restored == 2 * kChunk);
    KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), t, 2 * kChunk));
    CHECK(kvt::stored_bytes(cache.get(), 20 + t) == kvt::stored_bytes(cache.get(), t));
  }
}

TEST_CASE("stores: a kvc_prefix from a caller built before chunk_tokens gets the default 256") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: old } }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  const std::vector<int32_t> ids = prompt(256 + 10, 40);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, ids, 0, 256 + 10);
  kvc_prefix old = prefix_of(ids);
  old.chunk_tokens = 3;  // beyond the old caller's struct: not read
  old.struct_size = offsetof(kvc_prefix, chunk_tokens);
  int32_t saved = -1, restored = -1;
  KVT_REQUIRE_OK(kvc_prefix_save(cache.get(), 0, "mem", &old, &saved));
  CHECK(saved == 256);
  kvc_prefix current;
  kvc_prefix_init(&current, "model-a", ids.data(), static_cast<int32_t>(ids.size()));
  CHECK(current.chunk_tokens == 256);
  KVT_REQUIRE_OK(kvc_prefix_load(cache.get(), 1, "mem", &current, &restored));
  CHECK(restored == 256);
}

TEST_CASE("stores: a store's exists or remove failing fails the call with its code and name") {
  kvt::ContextPtr ctx = store_context(
      "  mem: { plugin: test_store, params: { space: ops } }\n"
      "  no_exists: { plugin: test_store, params: { space: ops, fail: exists, fail_after: 1 } }\n"
      "  no_remove: { plugin: test_store, params: { space: ops, fail: remove } }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  const std::vector<int32_t> ids = prompt(3 * kChunk, 50);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, ids, 0, 3 * kChunk);
  kvc_prefix p = prefix_of(ids);
  int32_t n = -1;
  // The second chunk's exists fails: the first chunk is written, whole; the call fails.
  Status st{kvc_prefix_save(cache.get(), 0, "no_exists", &p, &n)};
  CHECK(st.code() == KVC_ERR_IO);
  CHECK(kvt::contains(st.message(), "store 'no_exists' (plugin 'test_store'): exists"));
  CHECK(n == -1);
  KVT_REQUIRE_OK(kvc_prefix_load(cache.get(), 1, "mem", &p, &n));
  CHECK(n == kChunk);

  KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 1, "mem", "k"));
  Status removed{kvc_store_drop(ctx.get(), "no_remove", "k")};
  CHECK(removed.code() == KVC_ERR_IO);
  CHECK(kvt::contains(removed.message(), "injected remove failure"));
  KVT_CHECK_OK(kvc_seq_restore(cache.get(), 1, "mem", "k"));  // still there
  KVT_CHECK_OK(kvc_store_drop(ctx.get(), "mem", "k"));
}

TEST_CASE("stores: a value for another shape or dtype is refused with import's code, naming "
          "the store and the key") {
  kvt::ContextPtr ctx = store_context("  mem: { plugin: test_store, params: { space: shapes } }\n");
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, prompt(6, 20), 0, 6);
  KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "mem", "f16-sequence"));
  // Another shape: INVALID_ARGUMENT, as kvc_seq_import of the same bytes.
  kvc_cache_params wider = budgeted_params("h2o", 1000);
  wider.head_dim = 2 * kHeadDim;
  kvt::CachePtr other_shape = kvt::make_cache(ctx.get(), wider);
  Status shape{kvc_seq_restore(other_shape.get(), 0, "mem", "f16-sequence")};
  CHECK(shape.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(shape.message(), "store 'mem': the value under 'f16-sequence'"));
  CHECK(kvt::contains(shape.message(), "head_dim 16"));
  // A narrower storage dtype (lossy): UNSUPPORTED.
  kvt::CachePtr f32 = make_cache(ctx.get(), Shape{KVC_LAYOUT_PAGED, KVC_DTYPE_F32, "h2o"});
  KVT_REQUIRE_OK(kvc_seq_create(f32.get(), 0));
  feed_ids(f32.get(), 0, prompt(6, 20), 0, 6);
  KVT_REQUIRE_OK(kvc_seq_offload(f32.get(), 0, "mem", "f32-sequence"));
  Status dtype{kvc_seq_restore(cache.get(), 0, "mem", "f32-sequence")};
  CHECK(dtype.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(dtype.message(), "store 'mem': the value under 'f32-sequence'"));
  CHECK_FALSE(has_sequence(cache.get(), 0));
}

TEST_CASE("stores: a value older than the last one this context offloaded under its key is "
          "refused as stale; a newer one from another context is taken") {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("kvc_test_stale_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  const std::string stores = "  disk: { plugin: disk, params: { path: \"" + folder.string() +
                             "\", fsync: false } }\n";
  kvt::ContextPtr ctx = store_context(stores);
  kvt::CachePtr cache = make_cache(ctx.get(), Shape{});
  const std::filesystem::path file = folder / "v-turn";  // docs/stores.md, the disk store
  const std::filesystem::path kept = folder.string() + "-older";

  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, prompt(6, 21), 0, 6);
  const std::vector<unsigned char> older = export_bytes(cache.get(), 0);
  KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "disk", "turn"));
  std::filesystem::copy_file(file, kept, std::filesystem::copy_options::overwrite_existing);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  feed_ids(cache.get(), 0, prompt(9, 22), 0, 9);
  const std::vector<unsigned char> newer = export_bytes(cache.get(), 0);
  KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "disk", "turn"));

  // The store loses the newer value (as a promoted replica that never received it would).
  std::filesystem::copy_file(kept, file, std::filesystem::copy_options::overwrite_existing);
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  Status stale{kvc_seq_restore(cache.get(), 0, "disk", "turn")};
  CHECK(stale.code() == KVC_ERR_IO);
  CHECK(kvt::contains(stale.message(), "store 'disk': the value under 'turn' is stale"));
  CHECK_FALSE(has_sequence(cache.get(), 0));
  CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
  // What is there is the older value, whole: a context that never offloaded it restores it.
  kvt::ContextPtr other = store_context(stores);
  kvt::CachePtr reader = make_cache(other.get(), Shape{});
  KVT_REQUIRE_OK(kvc_seq_restore(reader.get(), 0, "disk", "turn"));
  CHECK(export_bytes(reader.get(), 0) == older);

  // A value offloaded later, by any context, is current.
  KVT_REQUIRE_OK(kvc_seq_remove(reader.get(), 0));
  KVT_REQUIRE_OK(kvc_seq_create(reader.get(), 0));
  feed_ids(reader.get(), 0, prompt(9, 22), 0, 9);
  KVT_REQUIRE_OK(kvc_seq_offload(reader.get(), 0, "disk", "turn"));
  KVT_REQUIRE_OK(kvc_seq_restore(cache.get(), 0, "disk", "turn"));
  CHECK(export_bytes(cache.get(), 0) == newer);
  // The older value put back again is refused again.
  std::filesystem::copy_file(kept, file, std::filesystem::copy_options::overwrite_existing);
  KVT_CHECK_ERR(kvc_seq_restore(cache.get(), 1, "disk", "turn"), KVC_ERR_IO);
  std::filesystem::remove_all(folder);
  std::filesystem::remove(kept);
}
