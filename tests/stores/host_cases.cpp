// The host store's own cases (test suite "host"): its capacity, least-recently-used eviction
// and parameters.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "store_cases.hpp"

namespace kvc::store_tests {
namespace {

bool exists(Store& store, const std::string& key) {
  bool found = false;
  REQUIRE(store.exists(key, found).code == KVC_OK);
  return found;
}

TEST_SUITE("host") {
  TEST_CASE("a put past the capacity evicts the least recently put or got") {
    StoreUnderTest store(Params{{"capacity", "300"}});
    REQUIRE(store.ok());
    const Environment& env = environment();
    for (const char* key : {"a", "b", "c"}) {
      REQUIRE(store.put(env.key(key), random_bytes(100, 1)).code == KVC_OK);
    }
    REQUIRE(store.get(env.key("a")).outcome.code == KVC_OK);  // order now a, c, b
    REQUIRE(store.put(env.key("d"), random_bytes(100, 2)).code == KVC_OK);
    CHECK_FALSE(exists(store, env.key("b")));
    CHECK(exists(store, env.key("a")));
    CHECK(exists(store, env.key("c")));
    REQUIRE(store.put(env.key("e"), random_bytes(100, 3)).code == KVC_OK);  // d, a, c: c goes
    CHECK_FALSE(exists(store, env.key("c")));
    CHECK(exists(store, env.key("a")));
    CHECK(exists(store, env.key("d")));
    // One value of 250 bytes needs two of the three to go: the two least recently used.
    REQUIRE(store.put(env.key("big"), random_bytes(250, 4)).code == KVC_OK);
    CHECK_FALSE(exists(store, env.key("a")));
    CHECK_FALSE(exists(store, env.key("d")));
    CHECK(exists(store, env.key("big")));
  }

  TEST_CASE("exists is no use: it leaves the eviction order alone") {
    StoreUnderTest store(Params{{"capacity", "200"}});
    REQUIRE(store.ok());
    const std::string a = environment().key("a"), b = environment().key("b");
    REQUIRE(store.put(a, random_bytes(100, 1)).code == KVC_OK);
    REQUIRE(store.put(b, random_bytes(100, 2)).code == KVC_OK);
    CHECK(exists(store, a));
    REQUIRE(store.put(environment().key("c"), random_bytes(100, 3)).code == KVC_OK);
    CHECK_FALSE(exists(store, a));
    CHECK(exists(store, b));
  }

  TEST_CASE("a replaced value's bytes are counted once") {
    StoreUnderTest store(Params{{"capacity", "200"}});
    REQUIRE(store.ok());
    const std::string a = environment().key("a"), b = environment().key("b");
    REQUIRE(store.put(a, random_bytes(150, 1)).code == KVC_OK);
    REQUIRE(store.put(a, random_bytes(150, 2)).code == KVC_OK);
    REQUIRE(store.put(b, random_bytes(50, 3)).code == KVC_OK);
    CHECK(store.get(a).value == random_bytes(150, 2));
    CHECK(exists(store, b));
    REQUIRE(store.remove(a).code == KVC_OK);
    REQUIRE(store.put(environment().key("c"), random_bytes(150, 4)).code == KVC_OK);
    CHECK(exists(store, b));
  }

  TEST_CASE("a value larger than the capacity is OUT_OF_MEMORY and evicts nothing") {
    StoreUnderTest store(Params{{"capacity", "100"}});
    REQUIRE(store.ok());
    const std::string kept = environment().key("kept"), key = environment().key("key");
    REQUIRE(store.put(kept, random_bytes(40, 1)).code == KVC_OK);
    REQUIRE(store.put(key, random_bytes(60, 2)).code == KVC_OK);
    const Outcome refused = store.put(key, random_bytes(101, 3));
    CHECK(refused.code == KVC_ERR_OUT_OF_MEMORY);
    CHECK(refused.message ==
          "host store: value of 101 bytes exceeds the store's capacity of 100");
    CHECK(store.get(kept).value == random_bytes(40, 1));
    CHECK(store.get(key).value == random_bytes(60, 2));
  }

  TEST_CASE("capacity takes the configuration's byte sizes") {
    // (text, bytes) from docs/config.md#byte-sizes; a value of exactly `bytes` fits, one more
    // byte does not.
    const std::vector<std::pair<const char*, size_t>> sizes{
        {"1000", 1000}, {"1KB", 1000},     {"2KiB", 2048}, {"1.5KiB", 1536},
        {"1.1KB", 1100}, {"0.001KiB", 1}, {"3 KiB", 3072}, {"1\tB", 1}};
    for (const auto& [text, bytes] : sizes) {
      CAPTURE(text);
      StoreUnderTest store(Params{{"capacity", text}});
      INFO(store.creation().message);
      REQUIRE(store.ok());
      CHECK(store.put(environment().key("fits"), random_bytes(bytes, 1)).code == KVC_OK);
      CHECK(store.put(environment().key("too-big"), random_bytes(bytes + 1, 1)).code ==
            KVC_ERR_OUT_OF_MEMORY);
    }
    for (const char* large : {"2GiB", "512 MiB", "1TiB"}) {
      CAPTURE(large);
      CHECK(StoreUnderTest(Params{{"capacity", large}}).ok());
    }
  }

  TEST_CASE("bad parameters are CONFIG naming the key and the value") {
    for (const char* bad : {"2 gigs", "-1", "1.5", "2gb", "2GiB ", "", "99999999999TiB"}) {
      CAPTURE(bad);
      StoreUnderTest store(Params{{"capacity", bad}});
      CHECK(store.creation().code == KVC_ERR_CONFIG);
      CHECK(store.creation().message.find("params.capacity") != std::string::npos);
      CHECK(store.creation().message.find("'" + std::string(bad) + "'") != std::string::npos);
    }
    StoreUnderTest twice(Params{{"capacity", "1KiB"}, {"capacity", "2KiB"}});
    CHECK(twice.creation().code == KVC_ERR_CONFIG);
    CHECK(twice.creation().message == "host store: params.capacity: given twice");
    StoreUnderTest unknown(Params{{"path", "/tmp"}});
    CHECK(unknown.creation().message ==
          "host store: params.path: unknown parameter, expected one of capacity");
  }

  TEST_CASE("a key longer than 1024 bytes is INVALID_ARGUMENT") {
    StoreUnderTest store;
    REQUIRE(store.ok());
    const Outcome put = store.put(std::string(1025, 'k'), random_bytes(1, 1));
    CHECK(put.code == KVC_ERR_INVALID_ARGUMENT);
    CHECK(put.message == "host store: key is longer than 1024 bytes");
    CHECK(store.get(std::string(1025, 'k')).outcome.code == KVC_ERR_INVALID_ARGUMENT);
  }
}

}  // namespace
}  // namespace kvc::store_tests
