// The store calls of the C API over a redis store whose server fails: an offload that cannot
// put leaves the sequence as it was, bit for bit; a restore that cannot get creates nothing.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "../../test_support.hpp"
#include "fault_support.hpp"
#include "redis_client.hpp"

namespace kvc::store_tests {
namespace {

using kvt::Status;

constexpr int32_t kLayers = 4, kKvHeads = 8, kQHeads = 8, kHeadDim = 128;

kvt::ContextPtr context_on(const RedisServer& server, const std::string& extra = "") {
  const std::string yaml = "stores:\n  remote: { plugin: redis, params: { host: 127.0.0.1, port: " +
                           std::to_string(server.port()) + ", key_prefix: 'capi:'" + extra +
                           " } }\n";
  return kvt::make_context(yaml.c_str());
}

kvt::CachePtr cache_in(kvc_context* context) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = KVC_DTYPE_F16;
  p.memory_limit = size_t{256} << 20;
  return kvt::make_cache(context, p);
}

// Sequence `seq` with `tokens` tokens of random K/V on every layer: 16 KiB per token.
void fill(kvc_cache* cache, int32_t seq, int32_t tokens) {
  KVT_REQUIRE_OK(kvc_seq_create(cache, seq));
  std::mt19937 random(static_cast<uint32_t>(seq) + 1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(tokens) * kKvHeads * kHeadDim);
  std::vector<float> v(k.size());
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (int32_t i = 0; i < tokens; ++i) pos[static_cast<size_t>(i)] = i;
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    for (float& x : k) x = uniform(random);
    for (float& x : v) x = uniform(random);
    kvc_batch batch;
    kvc_batch_init(&batch, 1, &seq, &tokens, pos.data());
    const kvc_tensor tk = kvt::tensor(k.data(), KVC_DTYPE_F32);
    const kvc_tensor tv = kvt::tensor(v.data(), KVC_DTYPE_F32);
    KVT_REQUIRE_OK(kvc_append(cache, layer, &batch, &tk, &tv));
  }
}

std::vector<unsigned char> image_of(kvc_cache* cache, int32_t seq) {
  size_t size = 0;
  KVT_REQUIRE_OK(kvc_seq_export_size(cache, seq, &size));
  std::vector<unsigned char> bytes(size);
  size_t written = 0;
  KVT_REQUIRE_OK(kvc_seq_export(cache, seq, bytes.data(), bytes.size(), &written));
  bytes.resize(written);
  return bytes;
}

bool has_sequence(kvc_cache* cache, int32_t seq) {
  int32_t n = 0;
  return Status{kvc_seq_length(cache, seq, 0, 0, &n)}.ok();
}

TEST_SUITE("redis_faults") {
  TEST_CASE("C API: an offload to a dead server is IO and leaves the sequence bit for bit; "
            "after a restart it goes and comes back whole") {
    RedisServer server;
    kvt::ContextPtr context = context_on(server);
    kvt::CachePtr cache = cache_in(context.get());
    fill(cache.get(), 0, 256);  // a 4 MiB image
    const std::vector<unsigned char> before = image_of(cache.get(), 0);
    const kvc_cache_stats stats_before = kvt::get_stats(cache.get());

    server.kill();
    KVT_CHECK_ERR(kvc_seq_offload(cache.get(), 0, "remote", "seq"), KVC_ERR_IO);
    REQUIRE(has_sequence(cache.get(), 0));
    CHECK(image_of(cache.get(), 0) == before);
    CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), stats_before));
    KVT_CHECK_ERR(kvc_seq_restore(cache.get(), 1, "remote", "seq"), KVC_ERR_IO);
    CHECK_FALSE(has_sequence(cache.get(), 1));

    server.restart();
    KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "remote", "seq"));
    CHECK_FALSE(has_sequence(cache.get(), 0));
    KVT_REQUIRE_OK(kvc_seq_restore(cache.get(), 0, "remote", "seq"));
    CHECK(image_of(cache.get(), 0) == before);
    KVT_CHECK_OK(kvc_store_drop(context.get(), "remote", "seq"));
  }

  TEST_CASE("C API: an offload to a full server is OUT_OF_MEMORY and leaves the sequence bit "
            "for bit") {
    RedisServer server({"--maxmemory", "16mb", "--maxmemory-policy", "noeviction"});
    kvt::ContextPtr context = context_on(server);
    kvt::CachePtr cache = cache_in(context.get());
    fill(cache.get(), 0, 2048);  // a 32 MiB image
    const std::vector<unsigned char> before = image_of(cache.get(), 0);
    KVT_CHECK_ERR(kvc_seq_offload(cache.get(), 0, "remote", "seq"), KVC_ERR_OUT_OF_MEMORY);
    REQUIRE(has_sequence(cache.get(), 0));
    CHECK(image_of(cache.get(), 0) == before);
  }

  TEST_CASE("C API: a restore of a damaged value is IO and creates nothing") {
    RedisServer server;
    kvt::ContextPtr context = context_on(server, ", part_bytes: 1MiB");
    kvt::CachePtr cache = cache_in(context.get());
    fill(cache.get(), 0, 256);
    KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "remote", "seq"));
    RedisClient client("127.0.0.1", server.port());
    const std::string manifest = manifest_key_of("capi:", "seq");
    const ManifestFields fields = read_manifest(client.text({"GET", manifest}));
    REQUIRE(fields.parts >= 2);

    SUBCASE("a part missing") {
      REQUIRE(client.text({"DEL", part_key_of(manifest, fields, 1)}) == "1");
    }
    SUBCASE("a byte changed") {
      const std::string part = part_key_of(manifest, fields, 1);
      const std::string byte = client.text({"GETRANGE", part, "7", "7"});
      REQUIRE(byte.size() == 1);
      const std::string flipped(1, static_cast<char>(byte[0] ^ 0x01));
      REQUIRE(client.text({"SETRANGE", part, "7", flipped}) == std::to_string(1 << 20));
    }
    KVT_CHECK_ERR(kvc_seq_restore(cache.get(), 0, "remote", "seq"), KVC_ERR_IO);
    CHECK_FALSE(has_sequence(cache.get(), 0));
    CHECK(kvt::get_stats(cache.get()).bytes_used == 0);
  }
}

}  // namespace
}  // namespace kvc::store_tests
