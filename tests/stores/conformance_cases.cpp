// The cases every store plugin passes (test suite "conformance"): the contract of
// kvc_store_vtable in kvcache_plugin.h.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "store_cases.hpp"

namespace kvc::store_tests {
namespace {

void require_created(const StoreUnderTest& store) {
  INFO("create: " << store.creation().message);
  REQUIRE(store.ok());
}

void check_round_trip(StoreUnderTest& store, const std::string& key,
                      const std::vector<unsigned char>& value) {
  const Outcome put = store.put(key, value);
  INFO("put: " << put.message);
  REQUIRE(put.code == KVC_OK);
  const GetResult got = store.get(key);
  INFO("get: " << got.outcome.message);
  REQUIRE(got.outcome.code == KVC_OK);
  CHECK(got.reserve_calls == 1);
  CHECK(got.reserved_size == value.size());
  CHECK(got.value == value);
}

bool exists(StoreUnderTest& store, const std::string& key) {
  bool found = false;
  const Outcome outcome = store.exists(key, found);
  INFO("exists: " << outcome.message);
  REQUIRE(outcome.code == KVC_OK);
  return found;
}

TEST_SUITE("conformance") {
  TEST_CASE("a value comes back exactly as put, whatever its size") {
    StoreUnderTest store;
    require_created(store);
    for (const size_t size : {size_t{0}, size_t{1}, size_t{1} << 20, size_t{64} << 20}) {
      CAPTURE(size);
      check_round_trip(store, environment().key("size-" + std::to_string(size)),
                       random_bytes(size, size + 1));
    }
  }

  TEST_CASE("an empty value may come without data") {
    StoreUnderTest store;
    require_created(store);
    const std::string key = environment().key("empty-without-data");
    const Outcome put = store.put(key, nullptr, 0);
    INFO("put: " << put.message);
    REQUIRE(put.code == KVC_OK);
    const GetResult got = store.get(key);
    REQUIRE(got.outcome.code == KVC_OK);
    CHECK(got.reserve_calls == 1);
    CHECK(got.value.empty());
  }

  TEST_CASE("put replaces a value, larger or smaller") {
    StoreUnderTest store;
    require_created(store);
    const std::string key = environment().key("replaced");
    check_round_trip(store, key, random_bytes(1000, 1));
    check_round_trip(store, key, random_bytes(100000, 2));
    check_round_trip(store, key, random_bytes(10, 3));
    check_round_trip(store, key, {});
  }

  TEST_CASE("exists follows put and remove") {
    StoreUnderTest store;
    require_created(store);
    const std::string key = environment().key("exists");
    CHECK_FALSE(exists(store, key));
    REQUIRE(store.put(key, random_bytes(10, 4)).code == KVC_OK);
    CHECK(exists(store, key));
    CHECK_FALSE(exists(store, environment().key("exists-other")));
    REQUIRE(store.remove(key).code == KVC_OK);
    CHECK_FALSE(exists(store, key));
  }

  TEST_CASE("a key without a value is NOT_FOUND for get and remove") {
    StoreUnderTest store;
    require_created(store);
    const std::string key = environment().key("missing");
    const GetResult never_put = store.get(key);
    CHECK(never_put.outcome.code == KVC_ERR_NOT_FOUND);
    CHECK_FALSE(never_put.outcome.message.empty());
    CHECK(never_put.reserve_calls == 0);
    CHECK(store.remove(key).code == KVC_ERR_NOT_FOUND);

    REQUIRE(store.put(key, random_bytes(10, 5)).code == KVC_OK);
    REQUIRE(store.remove(key).code == KVC_OK);
    CHECK(store.get(key).outcome.code == KVC_ERR_NOT_FOUND);
    const Outcome removed_twice = store.remove(key);
    CHECK(removed_twice.code == KVC_ERR_NOT_FOUND);
    CHECK_FALSE(removed_twice.message.empty());
  }

  TEST_CASE("a reserve callback without memory is OUT_OF_MEMORY, and the value stays") {
    StoreUnderTest store;
    require_created(store);
    const std::string key = environment().key("no-memory");
    const std::vector<unsigned char> value = random_bytes(1000, 6);
    REQUIRE(store.put(key, value).code == KVC_OK);
    const Outcome outcome = store.get_without_memory(key);
    CHECK(outcome.code == KVC_ERR_OUT_OF_MEMORY);
    CHECK_FALSE(outcome.message.empty());
    CHECK(store.get(key).value == value);
  }

  TEST_CASE("keys are told apart byte for byte: separators, spaces, UTF-8, escapes, 1024 bytes") {
    StoreUnderTest store;
    require_created(store);
    const std::string prefix = environment().key("");
    std::vector<std::string> keys;
    for (const char* suffix :
         {"a/b", "a%2Fb", "a_b", "a b", "a+b", "A/B", "a/b/", "/a", "a\\b", ".", "..", "...",
          "-", "%", "%25", "tab\there", "\xC3\xA9t\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC",
          "\xF0\x9F\x98\x80 emoji", "~!@#$^&*()[]{}<>?|;:'\",=`"}) {
      keys.push_back(prefix + suffix);
    }
    // Two of the longest keys the ABI allows, different only in their last byte.
    std::string longest = prefix;
    longest.resize(1023, 'k');
    keys.push_back(longest + "1");
    keys.push_back(longest + "2");
    // ... and two of 1024 bytes of '/' and UTF-8, which a percent-encoding triples.
    std::string escaped = prefix;
    while (escaped.size() + 3 <= 1023) escaped += "\xC3\xA9/";
    escaped.resize(1023, '/');
    keys.push_back(escaped + "a");
    keys.push_back(escaped + "b");

    for (size_t i = 0; i < keys.size(); ++i) {
      REQUIRE(keys[i].size() <= 1024);
      REQUIRE(store.put(keys[i], random_bytes(100 + i, 1000 + i)).code == KVC_OK);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      CAPTURE(keys[i]);
      const GetResult got = store.get(keys[i]);
      INFO("get: " << got.outcome.message);
      REQUIRE(got.outcome.code == KVC_OK);
      CHECK(got.value == random_bytes(100 + i, 1000 + i));
    }
    REQUIRE(store.remove(keys[0]).code == KVC_OK);
    CHECK(store.get(keys[1]).outcome.code == KVC_OK);
  }

  TEST_CASE("unknown parameters are CONFIG naming the key") {
    Params params = environment().fresh_params();
    params.emplace_back("no_such_parameter", "1");
    StoreUnderTest store(params);
    CHECK_FALSE(store.ok());
    CHECK(store.creation().code == KVC_ERR_CONFIG);
    CHECK(store.creation().message.find("no_such_parameter") != std::string::npos);
  }

  TEST_CASE("8 threads put and get distinct and shared keys at once; every get is a whole value") {
    StoreUnderTest store;
    require_created(store);
    constexpr uint32_t kThreads = 8;
    constexpr uint32_t kRounds = 40;
    const std::string shared = environment().key("shared");
    store.track(shared);
    std::vector<std::string> own(kThreads);
    for (uint32_t t = 0; t < kThreads; ++t) {
      own[t] = environment().key("own-" + std::to_string(t));
      store.track(own[t]);
    }
    std::atomic<int> failed_calls{0}, wrong_own{0}, torn_shared{0}, shared_seen{0};
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint32_t round = 0; round < kRounds; ++round) {
          const std::vector<unsigned char> value = signed_value(t, round);
          if (store.Store::put(own[t], value).code != KVC_OK) ++failed_calls;
          if (store.Store::put(shared, value).code != KVC_OK) ++failed_calls;
          const GetResult mine = store.get(own[t]);
          if (mine.outcome.code != KVC_OK || mine.value != value) ++wrong_own;
          const GetResult any = store.get(shared);
          uint32_t writer = 0;
          if (any.outcome.code != KVC_OK) {
            ++failed_calls;
          } else if (!is_whole_signed_value(any.value, &writer) || writer >= kThreads) {
            ++torn_shared;
          } else {
            ++shared_seen;
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    CHECK(failed_calls == 0);
    CHECK(wrong_own == 0);
    CHECK(torn_shared == 0);
    CHECK(shared_seen == int{kThreads * kRounds});
    uint32_t last_writer = 0;
    CHECK(is_whole_signed_value(store.get(shared).value, &last_writer));
  }
}

}  // namespace
}  // namespace kvc::store_tests
