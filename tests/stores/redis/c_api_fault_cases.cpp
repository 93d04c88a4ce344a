// The store calls of the C API over a redis store whose server fails: an offload that cannot
// put leaves the sequence as it was, bit for bit; a restore that cannot get creates nothing.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../../test_support.hpp"
#include "fault_support.hpp"
#include "redis_client.hpp"
#include "sequences.hpp"

namespace kvc::store_tests {
namespace {


kvt::ContextPtr context_on(const RedisServer& server, const std::string& extra = "") {
  const std::string yaml = "stores:\n  remote: { plugin: redis, params: { host: 127.0.0.1, port: " +
                           std::to_string(server.port()) + ", key_prefix: 'capi:'" + extra +
                           " } }\n";
  return kvt::make_context(yaml.c_str());
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
