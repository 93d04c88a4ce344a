// Faults of one node: the server killed in the middle of calls and restarted, values damaged
// underneath, refused credentials, a full server.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "fault_support.hpp"
#include "redis_client.hpp"

namespace kvc::store_tests {
namespace {

constexpr size_t kBig = size_t{64} << 20;

void require_created(const Store& store) {
  INFO("create: " << store.creation().message);
  REQUIRE(store.ok());
}

// Runs `call` in a thread while `server` is paused, kills the server once the call has had a
// moment to start (the call cannot finish while the server is stopped, so whether it is
// sending, waiting or connecting when the kill comes, it meets a dead server), and returns
// the call's outcome.
template <class Call>
Outcome killed_during(RedisServer& server, Call call) {
  server.pause();
  Outcome outcome;
  std::thread caller([&] { outcome = call(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server.kill();
  caller.join();
  return outcome;
}

TEST_SUITE("redis_faults") {
  TEST_CASE("a server killed during a 64 MiB put: IO naming the server; after a restart on the "
            "same port the next put and get succeed") {
    RedisServer server;
    Store store(redis_plugin(), params_for(server, {{"timeout_ms", "60000"}}));
    require_created(store);
    const std::vector<unsigned char> small = bytes_of(1000, 1);
    REQUIRE(store.put("warm", small).code == KVC_OK);  // a pooled connection, killed below
    const std::vector<unsigned char> big = bytes_of(kBig, 2);
    const Outcome put = killed_during(server, [&] { return store.put("big", big); });
    INFO("put: " << put.message);
    CHECK(put.code == KVC_ERR_IO);
    CHECK(contains(put.message, server.address()));

    server.restart();
    const Outcome again = store.put("big", big);
    INFO("put after the restart: " << again.message);
    REQUIRE(again.code == KVC_OK);
    const GetResult got = store.get("big");
    INFO("get after the restart: " << got.outcome.message);
    REQUIRE(got.outcome.code == KVC_OK);
    CHECK(got.value == big);
  }

  TEST_CASE("a server killed during a 64 MiB get: IO naming the server; after a restart the "
            "next calls reconnect") {
    RedisServer server;
    Store store(redis_plugin(), params_for(server, {{"timeout_ms", "60000"}}));
    require_created(store);
    const std::vector<unsigned char> big = bytes_of(kBig, 3);
    REQUIRE(store.put("big", big).code == KVC_OK);
    GetResult got;
    const Outcome get = killed_during(server, [&] {
      got = store.get("big");
      return got.outcome;
    });
    INFO("get: " << get.message);
    CHECK(get.code == KVC_ERR_IO);
    CHECK(contains(get.message, server.address()));

    server.restart();  // without persistence: empty
    bool found = true;
    const Outcome exists = store.exists("big", found);
    INFO("exists after the restart: " << exists.message);
    CHECK(exists.code == KVC_OK);
    CHECK_FALSE(found);
    CHECK(store.get("big").outcome.code == KVC_ERR_NOT_FOUND);
  }

  TEST_CASE("a put whose connection goes before EXEC ran leaves the old value whole") {
    RedisServer server;
    Store store(redis_plugin(), params_for(server, {{"timeout_ms", "300"}}));
    require_created(store);
    const std::vector<unsigned char> old_value = bytes_of(size_t{3} << 20, 25);
    REQUIRE(store.put("k", old_value).code == KVC_OK);
    RedisClient admin("127.0.0.1", server.port());
    // Reads go on, writes wait: the put reads the old manifest, then its transaction stops at
    // the first SET until the store gives up on it and drops the connection.
    REQUIRE(admin.text({"CLIENT", "PAUSE", "60000", "WRITE"}) == "OK");
    const Outcome put = store.put("k", bytes_of(kBig, 26));
    INFO("put: " << put.message);
    CHECK(put.code == KVC_ERR_IO);
    CHECK(contains(put.message, "timed out after 300 ms"));
    REQUIRE(admin.text({"CLIENT", "UNPAUSE"}) == "OK");
    CHECK(admin.keys("kvc:*").size() == 2);  // the old manifest and its one part
    const GetResult got = store.get("k");
    INFO("get: " << got.outcome.message);
    REQUIRE(got.outcome.code == KVC_OK);
    CHECK(got.value == old_value);
  }

  TEST_CASE("an unreachable server: create succeeds; every call is IO naming the address") {
    std::string address;
    Params params;
    {
      RedisServer gone;
      address = gone.address();
      params = params_for(gone, {{"timeout_ms", "2000"}});
    }  // killed: nothing listens on its port now
    Store store(redis_plugin(), params);
    require_created(store);
    const Outcome put = store.put("k", bytes_of(10, 4));
    CHECK(put.code == KVC_ERR_IO);
    CHECK(contains(put.message, address));
    CHECK(store.get("k").outcome.code == KVC_ERR_IO);
    bool found = false;
    CHECK(store.exists("k", found).code == KVC_ERR_IO);
    CHECK(store.remove("k").code == KVC_ERR_IO);
  }

  TEST_CASE("idle connections the server closed are replaced without an error") {
    RedisServer server;
    Store store(redis_plugin(), params_for(server, {{"pool", "3"}}));
    require_created(store);
    std::vector<std::thread> threads;  // three connections in the pool
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        CHECK(store.put("k" + std::to_string(t), bytes_of(1000, 20 + t)).code == KVC_OK);
      });
    }
    for (std::thread& thread : threads) thread.join();
    RedisClient admin("127.0.0.1", server.port());
    REQUIRE(std::stoi(admin.text({"CLIENT", "KILL", "TYPE", "normal"})) >= 1);
    for (int t = 0; t < 3; ++t) {
      const GetResult got = store.get("k" + std::to_string(t));
      INFO("get: " << got.outcome.message);
      REQUIRE(got.outcome.code == KVC_OK);
      CHECK(got.value == bytes_of(1000, 20 + t));
    }
  }

  TEST_CASE("a server that stops answering: IO 'timed out' after timeout_ms") {
    RedisServer server;
    Store store(redis_plugin(), params_for(server, {{"timeout_ms", "300"}}));
    require_created(store);
    REQUIRE(store.put("k", bytes_of(1000, 23)).code == KVC_OK);
    server.pause();
    const GetResult got = store.get("k");
    INFO("get: " << got.outcome.message);
    CHECK(got.outcome.code == KVC_ERR_IO);
    CHECK(contains(got.outcome.message, "timed out after 300 ms"));
    CHECK(contains(got.outcome.message, server.address()));
  }

  TEST_CASE("16 threads share a pool of 2 connections") {
    RedisServer server;
    Store store(redis_plugin(), params_for(server, {{"pool", "2"}, {"part_bytes", "10000"}}));
    require_created(store);
    std::vector<std::thread> threads;
    std::vector<int> failures(16, 0);
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 10; ++round) {
          const std::vector<unsigned char> value = bytes_of(50000 + t, 100 * t + round);
          const std::string key = "t" + std::to_string(t);
          if (store.put(key, value).code != KVC_OK) ++failures[t];
          const GetResult got = store.get(key);
          if (got.outcome.code != KVC_OK || got.value != value) ++failures[t];
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < 16; ++t) CHECK(failures[t] == 0);
    RedisClient admin("127.0.0.1", server.port());
    // The store's connections and this one.
    const std::string clients = admin.text({"CLIENT", "LIST"});
    CHECK(std::count(clients.begin(), clients.end(), '\n') <= 3);
  }

  TEST_CASE("a unix socket, and db selecting a database") {
    RedisServer server({"--unixsocket", "redis.sock", "--unixsocketperm", "700"});
    const std::string socket = server.folder() + "/redis.sock";
    Store by_socket(redis_plugin(), {{"unix_socket", socket}, {"db", "3"}});
    require_created(by_socket);
    const std::vector<unsigned char> value = bytes_of(3000, 24);
    const Outcome put = by_socket.put("k", value);
    INFO("put: " << put.message);
    REQUIRE(put.code == KVC_OK);
    Store by_tcp(redis_plugin(), params_for(server, {{"db", "3"}}));
    CHECK(by_tcp.get("k").value == value);
    Store other_db(redis_plugin(), params_for(server));
    CHECK(other_db.get("k").outcome.code == KVC_ERR_NOT_FOUND);
    RedisClient admin("127.0.0.1", server.port());
    REQUIRE(admin.text({"SELECT", "3"}) == "OK");
    CHECK(admin.text({"EXISTS", manifest_key_of("kvc:", "k")}) == "1");

    Store out_of_range(redis_plugin(), params_for(server, {{"db", "100"}}));
    const Outcome refused = out_of_range.put("k", value);
    INFO("put to db 100: " << refused.message);
    CHECK(refused.code == KVC_ERR_CONFIG);
    CHECK(contains(refused.message, "params.db"));
  }

  TEST_CASE("a part deleted underneath: get is IO 'incomplete' naming the part") {
    RedisServer server;
    Store store(redis_plugin(),
                params_for(server, {{"part_bytes", "1MiB"}, {"key_prefix", "fault:"}}));
    require_created(store);
    const std::vector<unsigned char> value = bytes_of(size_t{8} << 20, 5);
    REQUIRE(store.put("damaged", value).code == KVC_OK);
    RedisClient client("127.0.0.1", server.port());
    const std::string manifest = manifest_key_of("fault:", "damaged");
    const ManifestFields fields = read_manifest(client.text({"GET", manifest}));
    REQUIRE(fields.parts == 8);  // 8 MiB in parts of 1 MiB
    CHECK(client.keys("fault:*").size() == 9);
    REQUIRE(client.text({"DEL", part_key_of(manifest, fields, 3)}) == "1");

    const GetResult got = store.get("damaged");
    INFO("get: " << got.outcome.message);
    CHECK(got.outcome.code == KVC_ERR_IO);
    CHECK(contains(got.outcome.message, "incomplete value: part 3 of 8 missing"));
    CHECK(contains(got.outcome.message, "'damaged'"));
  }

  TEST_CASE("a byte of a part changed underneath: get is IO 'checksum mismatch'") {
    RedisServer server;
    Store store(redis_plugin(),
                params_for(server, {{"part_bytes", "1MiB"}, {"key_prefix", "fault:"}}));
    require_created(store);
    const std::vector<unsigned char> value = bytes_of(size_t{5} << 20, 6);
    REQUIRE(store.put("corrupt", value).code == KVC_OK);
    RedisClient client("127.0.0.1", server.port());
    const std::string manifest = manifest_key_of("fault:", "corrupt");
    const ManifestFields fields = read_manifest(client.text({"GET", manifest}));
    const std::string part = part_key_of(manifest, fields, 2);
    const std::string flipped(1, static_cast<char>(value[(size_t{2} << 20) + 100] ^ 0xFF));
    REQUIRE(client.text({"SETRANGE", part, "100", flipped}) == std::to_string(1 << 20));

    const GetResult got = store.get("corrupt");
    INFO("get: " << got.outcome.message);
    CHECK(got.outcome.code == KVC_ERR_IO);
    CHECK(contains(got.outcome.message, "checksum mismatch"));
    CHECK(contains(got.outcome.message, "'corrupt'"));
  }

  TEST_CASE("refused credentials are CONFIG; the right ones work") {
    RedisServer server({"--requirepass", "right-password"});
    RedisClient admin("127.0.0.1", server.port());
    REQUIRE(admin.text({"AUTH", "right-password"}) == "OK");
    REQUIRE(admin.text({"ACL", "SETUSER", "alice", "on", ">alice-password", "~*", "+@all"}) ==
            "OK");
    const std::vector<unsigned char> value = bytes_of(100, 7);

    SUBCASE("a wrong password") {
      setenv("KVC_REDIS_FAULT_PASSWORD", "wrong-password", 1);
      Store store(redis_plugin(),
                  params_for(server, {{"password_env", "KVC_REDIS_FAULT_PASSWORD"}}));
      require_created(store);  // connects on use
      const Outcome put = store.put("k", value);
      INFO("put: " << put.message);
      CHECK(put.code == KVC_ERR_CONFIG);
      CHECK(contains(put.message, "authentication failed for user 'default'"));
    }
    SUBCASE("no password") {
      Store store(redis_plugin(), params_for(server));
      require_created(store);
      const GetResult got = store.get("k");
      INFO("get: " << got.outcome.message);
      CHECK(got.outcome.code == KVC_ERR_CONFIG);
      CHECK(contains(got.outcome.message, "NOAUTH"));
    }
    SUBCASE("a user with another's password") {
      setenv("KVC_REDIS_FAULT_PASSWORD", "right-password", 1);
      Store store(redis_plugin(),
                  params_for(server, {{"username", "alice"},
                                      {"password_env", "KVC_REDIS_FAULT_PASSWORD"}}));
      require_created(store);
      const Outcome put = store.put("k", value);
      INFO("put: " << put.message);
      CHECK(put.code == KVC_ERR_CONFIG);
      CHECK(contains(put.message, "authentication failed for user 'alice'"));
    }
    SUBCASE("the variable unset is CONFIG at create, naming it") {
      unsetenv("KVC_REDIS_FAULT_PASSWORD");
      Store store(redis_plugin(),
                  params_for(server, {{"password_env", "KVC_REDIS_FAULT_PASSWORD"}}));
      CHECK_FALSE(store.ok());
      CHECK(store.creation().code == KVC_ERR_CONFIG);
      CHECK(contains(store.creation().message, "'KVC_REDIS_FAULT_PASSWORD'"));
    }
    SUBCASE("the right password, as default and as an ACL user") {
      setenv("KVC_REDIS_FAULT_PASSWORD", "right-password", 1);
      setenv("KVC_REDIS_FAULT_ALICE", "alice-password", 1);
      Store as_default(redis_plugin(),
                       params_for(server, {{"password_env", "KVC_REDIS_FAULT_PASSWORD"}}));
      Store as_alice(redis_plugin(),
                     params_for(server, {{"username", "alice"},
                                         {"password_env", "KVC_REDIS_FAULT_ALICE"}}));
      require_created(as_default);
      require_created(as_alice);
      const Outcome put = as_default.put("k", value);
      INFO("put: " << put.message);
      REQUIRE(put.code == KVC_OK);
      const GetResult got = as_alice.get("k");
      INFO("get: " << got.outcome.message);
      REQUIRE(got.outcome.code == KVC_OK);
      CHECK(got.value == value);
    }
    unsetenv("KVC_REDIS_FAULT_PASSWORD");
    unsetenv("KVC_REDIS_FAULT_ALICE");
  }

  TEST_CASE("an ACL user with the commands docs/stores.md lists can do everything; one "
            "without DEL is CONFIG 'lacks a permission' on remove") {
    RedisServer server;
    RedisClient admin("127.0.0.1", server.port());
    REQUIRE(admin.text({"ACL", "SETUSER", "kvc", "on", ">kvc-password", "~kvc:*", "+get", "+set",
                        "+pexpire", "+getdel", "+del", "+exists", "+multi", "+exec", "+select",
                        "+cluster|slots", "+asking"}) == "OK");
    REQUIRE(admin.text({"ACL", "SETUSER", "nodel", "on", ">kvc-password", "~kvc:*", "+get",
                        "+set", "+pexpire", "+getdel", "+exists", "+multi", "+exec"}) == "OK");
    setenv("KVC_REDIS_FAULT_PASSWORD", "kvc-password", 1);
    Store store(redis_plugin(), params_for(server, {{"username", "kvc"},
                                                    {"password_env", "KVC_REDIS_FAULT_PASSWORD"},
                                                    {"db", "2"}, {"part_bytes", "1000"}}));
    require_created(store);
    const std::vector<unsigned char> first = bytes_of(5000, 27), second = bytes_of(3000, 28);
    Outcome outcome = store.put("k", first);
    INFO("put: " << outcome.message);
    REQUIRE(outcome.code == KVC_OK);
    outcome = store.put("k", second);  // replaces: PEXPIRE of the old parts
    INFO("put again: " << outcome.message);
    REQUIRE(outcome.code == KVC_OK);
    CHECK(store.get("k").value == second);
    bool found = false;
    CHECK(store.exists("k", found).code == KVC_OK);
    CHECK(found);
    outcome = store.remove("k");
    INFO("remove: " << outcome.message);
    CHECK(outcome.code == KVC_OK);

    Store no_del(redis_plugin(),
                 params_for(server, {{"username", "nodel"},
                                     {"password_env", "KVC_REDIS_FAULT_PASSWORD"}}));
    REQUIRE(no_del.put("k", first).code == KVC_OK);
    const Outcome refused = no_del.remove("k");
    INFO("remove without DEL: " << refused.message);
    CHECK(refused.code == KVC_ERR_CONFIG);
    CHECK(contains(refused.message, "user 'nodel' lacks a permission"));
    CHECK(no_del.get("k").value == first);  // the refused transaction changed nothing
    unsetenv("KVC_REDIS_FAULT_PASSWORD");
  }

  TEST_CASE("a full server (maxmemory, noeviction): a 64 MiB put is OUT_OF_MEMORY and the "
            "value it would replace stays whole") {
    RedisServer server({"--maxmemory", "16mb", "--maxmemory-policy", "noeviction"});
    Store store(redis_plugin(), params_for(server, {{"key_prefix", "full:"}}));
    require_created(store);
    const std::vector<unsigned char> before = bytes_of(size_t{1} << 20, 8);
    REQUIRE(store.put("k", before).code == KVC_OK);
    const Outcome put = store.put("k", bytes_of(kBig, 9));
    INFO("put: " << put.message);
    CHECK(put.code == KVC_ERR_OUT_OF_MEMORY);
    CHECK(contains(put.message, server.address()));
    const GetResult got = store.get("k");
    INFO("get: " << got.outcome.message);
    REQUIRE(got.outcome.code == KVC_OK);
    CHECK(got.value == before);
    RedisClient client("127.0.0.1", server.port());
    CHECK(client.keys("full:*").size() == 2);  // the manifest and one part: nothing of the put
  }
}

}  // namespace
}  // namespace kvc::store_tests
