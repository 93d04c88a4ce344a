// The redis store's own cases against the shared servers (suites "redis", run on the single
// node and on the cluster, and "redis_cluster"): how a value lies in Redis, read back with
// the tests' own hiredis client and the documented layout, keys that hold braces, bad
// parameters, damaged manifests, and values spread over a cluster.
#include <doctest/doctest.h>
#include <xxhash.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../store_cases.hpp"
#include "redis_client.hpp"

namespace kvc::store_tests {
namespace {

// The run's own key prefix for the store (no braces: the environment's key prefix has none).
std::string run_prefix(const std::string& name) { return environment().key(name + ":"); }

// The servers the parameters point at: the single node, or every cluster node given.
std::vector<std::unique_ptr<RedisClient>> servers_of(const Params& params) {
  std::vector<std::unique_ptr<RedisClient>> servers;
  std::string host = "127.0.0.1";
  for (const auto& [key, value] : params) {
    if (key == "host") host = value;
  }
  for (const auto& [key, value] : params) {
    if (key == "port") servers.push_back(std::make_unique<RedisClient>(host, std::stoi(value)));
    if (key != "nodes") continue;
    size_t begin = 0;
    while (begin < value.size()) {
      const size_t comma = std::min(value.find(',', begin), value.size());
      std::string node_host;
      int node_port = 0;
      split_host_port(value.substr(begin, comma - begin), node_host, node_port);
      servers.push_back(std::make_unique<RedisClient>(node_host, node_port));
      begin = comma + 1;
    }
  }
  return servers;
}

bool is_cluster(const Params& params) {
  for (const auto& entry : params) {
    if (entry.first == "nodes") return true;
  }
  return false;
}

// Keys matching `pattern` on each server.
std::vector<std::vector<std::string>> keys_per_server(
    const std::vector<std::unique_ptr<RedisClient>>& servers, const std::string& pattern) {
  std::vector<std::vector<std::string>> keys;
  for (const auto& server : servers) keys.push_back(server->keys(pattern));
  return keys;
}

size_t total(const std::vector<std::vector<std::string>>& keys) {
  size_t n = 0;
  for (const auto& node : keys) n += node.size();
  return n;
}

// The value under `key` read straight from the server that holds its manifest, following
// the documented layout.
std::vector<unsigned char> read_by_hand(RedisClient& server, const std::string& manifest,
                                        ManifestFields& fields) {
  fields = read_manifest(server.text({"GET", manifest}));
  std::string value;
  for (uint64_t i = 0; i < fields.parts; ++i) {
    value += server.text({"GET", part_key_of(manifest, fields, i)});
  }
  return std::vector<unsigned char>(value.begin(), value.end());
}

// -MOVED and -ASK replies the servers have sent so far (INFO errorstats).
long redirections(const std::vector<std::unique_ptr<RedisClient>>& servers) {
  long total = 0;
  for (const auto& server : servers) {
    const std::string stats = server->text({"INFO", "errorstats"});
    for (const std::string name : {"errorstat_MOVED:count=", "errorstat_ASK:count="}) {
      const size_t at = stats.find(name);
      if (at != std::string::npos) total += std::stol(stats.substr(at + name.size()));
    }
  }
  return total;
}

Params with(Params params, const Params& extra) {
  params.insert(params.end(), extra.begin(), extra.end());
  return params;
}

TEST_SUITE("redis") {
  TEST_CASE("a value lies in ceil(size / part_bytes) parts and a manifest on one node; a "
            "replace gives the old parts 10 s to live, a remove deletes the value") {
    const std::string prefix = run_prefix("layout");
    const Params params = with(environment().fresh_params(),
                               {{"key_prefix", prefix}, {"part_bytes", "1000"}});
    StoreUnderTest store(params);
    INFO("create: " << store.creation().message);
    REQUIRE(store.ok());
    const auto servers = servers_of(params);
    const std::vector<unsigned char> value = random_bytes(10500, 21);
    REQUIRE(store.put("value", value).code == KVC_OK);

    const auto keys = keys_per_server(servers, prefix + "*");
    REQUIRE(total(keys) == 1 + 11);
    size_t holder = 0;
    while (keys[holder].empty()) ++holder;
    CHECK(keys[holder].size() == 12);  // all on one node
    ManifestFields fields;
    const std::string manifest = manifest_key_of(prefix, "value");
    CHECK(read_by_hand(*servers[holder], manifest, fields) == value);
    CHECK(fields.version == 1);
    CHECK(fields.size == value.size());
    CHECK(fields.part_bytes == 1000);
    CHECK(fields.parts == 11);
    CHECK(fields.checksum == XXH3_64bits(value.data(), value.size()));

    const std::vector<unsigned char> smaller = random_bytes(2001, 22);
    REQUIRE(store.put("value", smaller).code == KVC_OK);
    ManifestFields replaced;
    CHECK(read_by_hand(*servers[holder], manifest, replaced) == smaller);
    CHECK(replaced.generation != fields.generation);
    RedisClient& server = *servers[holder];
    // The new parts stay; the old ones expire (for gets that read the old manifest just before).
    auto ttl_ms = [&](const std::string& key) { return std::stol(server.text({"PTTL", key})); };
    CHECK(total(keys_per_server(servers, prefix + "*")) == 1 + 3 + 11);
    CHECK(ttl_ms(manifest) == -1);
    for (uint64_t i = 0; i < 3; ++i) CHECK(ttl_ms(part_key_of(manifest, replaced, i)) == -1);
    for (uint64_t i = 0; i < 11; ++i) {
      const long ttl = ttl_ms(part_key_of(manifest, fields, i));
      CHECK(ttl > 0);
      CHECK(ttl <= 10000);
    }
    REQUIRE(store.remove("value").code == KVC_OK);
    CHECK(server.text({"EXISTS", manifest}) == "0");
    for (uint64_t i = 0; i < 3; ++i) {
      CHECK(server.text({"EXISTS", part_key_of(manifest, replaced, i)}) == "0");
    }
    for (uint64_t i = 0; i < 11; ++i) {  // not left to expire: this run's keys go now
      CHECK(server.text({"DEL", part_key_of(manifest, fields, i)}) == "1");
    }
  }

  TEST_CASE("keys holding braces and percent signs: each value's keys share one hash tag, and "
            "no two keys meet") {
    const std::string prefix = run_prefix("braces");
    const Params params = with(environment().fresh_params(),
                               {{"key_prefix", prefix}, {"part_bytes", "1000"}});
    StoreUnderTest store(params);
    REQUIRE(store.ok());
    // In a cluster, a value whose keys had different hash tags would fail its MULTI
    // (CROSSSLOT); "}" and "%7D" would meet under a careless escape.
    const std::vector<std::string> keys{"a}b", "{x}", "}", "%7D", "%", "", "{", "a{b}c}", "{}"};
    for (size_t i = 0; i < keys.size(); ++i) {
      CAPTURE(keys[i]);
      const Outcome put = store.put(keys[i], random_bytes(2500, 30 + i));
      INFO("put: " << put.message);
      REQUIRE(put.code == KVC_OK);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      CAPTURE(keys[i]);
      const GetResult got = store.get(keys[i]);
      INFO("get: " << got.outcome.message);
      REQUIRE(got.outcome.code == KVC_OK);
      CHECK(got.value == random_bytes(2500, 30 + i));
    }
    CHECK(total(keys_per_server(servers_of(params), prefix + "*")) == keys.size() * 4);
  }

  TEST_CASE("bad parameters are CONFIG naming the key") {
    const std::vector<std::pair<Params, std::string>> bad{
        {{{"port", "0"}}, "params.port"},
        {{{"port", "6379x"}}, "params.port"},
        {{{"host", ""}}, "params.host"},
        {{{"nodes", "no-port"}}, "params.nodes"},
        {{{"nodes", "127.0.0.1:1,"}}, "params.nodes"},
        {{{"nodes", "127.0.0.1:1"}, {"db", "1"}}, "params.db"},
        {{{"nodes", "127.0.0.1:1"}, {"host", "127.0.0.1"}}, "params.host"},
        {{{"unix_socket", "/tmp/x.sock"}, {"port", "1"}}, "params.port"},
        {{{"key_prefix", "a{b"}}, "params.key_prefix"},
        {{{"username", "alice"}}, "params.username"},
        {{{"password_env", "KVC_TEST_SURELY_UNSET_VARIABLE"}}, "KVC_TEST_SURELY_UNSET_VARIABLE"},
        {{{"part_bytes", "0"}}, "params.part_bytes"},
        {{{"part_bytes", "1GiB"}}, "params.part_bytes"},
        {{{"timeout_ms", "0"}}, "params.timeout_ms"},
        {{{"pool", "0"}}, "params.pool"},
        {{{"db", "-1"}}, "params.db"},
        {{{"wait_replicas", "-1"}}, "params.wait_replicas"},
        {{{"wait_replicas", "65"}}, "params.wait_replicas"},
        {{{"wait_timeout_ms", "0"}}, "params.wait_timeout_ms"},
        {{{"wait_replicas", "1"}, {"wait_timeout_ms", "5000"}}, "params.wait_timeout_ms"},
        {{{"wait_replicas", "1"}, {"timeout_ms", "100"}}, "params.wait_timeout_ms"},
    };
    for (const auto& [params, named] : bad) {
      CAPTURE(named);
      Store store(environment().plugin(), params);
      CHECK_FALSE(store.ok());
      CHECK(store.creation().code == KVC_ERR_CONFIG);
      CHECK(store.creation().message.find(named) != std::string::npos);
    }
  }

  TEST_CASE("a manifest that is not one is IO naming the key; remove still deletes it") {
    const std::string prefix = run_prefix("foreign");
    const Params params = with(environment().fresh_params(), {{"key_prefix", prefix}});
    StoreUnderTest store(params);
    REQUIRE(store.ok());
    REQUIRE(store.put("k", random_bytes(10, 40)).code == KVC_OK);
    const auto servers = servers_of(params);
    const std::string manifest = manifest_key_of(prefix, "k");
    for (const auto& server : servers) {
      if (server->text({"EXISTS", manifest}) == "1") {
        // Its part, which no manifest names once this one is overwritten, goes first.
        const ManifestFields fields = read_manifest(server->text({"GET", manifest}));
        REQUIRE(server->text({"DEL", part_key_of(manifest, fields, 0)}) == "1");
        REQUIRE(server->text({"SET", manifest, "not a manifest at all"}) == "OK");
      }
    }
    const GetResult got = store.get("k");
    INFO("get: " << got.outcome.message);
    CHECK(got.outcome.code == KVC_ERR_IO);
    CHECK(got.outcome.message.find("is not a redis store manifest") != std::string::npos);
    CHECK(got.outcome.message.find("'k'") != std::string::npos);
    CHECK(got.reserve_calls == 0);
    REQUIRE(store.remove("k").code == KVC_OK);
    bool found = true;
    REQUIRE(store.exists("k", found).code == KVC_OK);
    CHECK_FALSE(found);
  }
}

TEST_SUITE("redis_cluster") {
  TEST_CASE("values spread over every master given, each sent to its master at once (the "
            "key slots match the servers': no -MOVED); a store seeded with one node reads what "
            "another wrote") {
    const std::string prefix = run_prefix("spread");
    const Params params = with(environment().fresh_params(), {{"key_prefix", prefix}});
    REQUIRE(is_cluster(params));
    StoreUnderTest store(params);
    REQUIRE(store.ok());
    const auto servers = servers_of(params);
    const long redirected_before = redirections(servers);
    constexpr int kKeys = 64;
    for (int i = 0; i < kKeys; ++i) {
      REQUIRE(store.put("k" + std::to_string(i), random_bytes(100, 50 + i)).code == KVC_OK);
    }
    CHECK(redirections(servers) == redirected_before);
    const auto keys = keys_per_server(servers, prefix + "*");
    CHECK(total(keys) == kKeys * 2);
    for (size_t node = 0; node < keys.size(); ++node) {
      CAPTURE(node);
      CHECK_FALSE(keys[node].empty());
    }

    std::string last_seed;
    for (const auto& [key, value] : params) {
      if (key == "nodes") last_seed = value.substr(value.rfind(',') + 1);
    }
    Params one_seed;
    for (const auto& entry : params) {
      one_seed.push_back(entry.first == "nodes" ? std::make_pair(entry.first, last_seed) : entry);
    }
    Store reader(environment().plugin(), one_seed);
    REQUIRE(reader.ok());
    for (int i = 0; i < kKeys; ++i) {
      const GetResult got = reader.get("k" + std::to_string(i));
      INFO("get: " << got.outcome.message);
      REQUIRE(got.outcome.code == KVC_OK);
      CHECK(got.value == random_bytes(100, 50 + i));
    }
  }
}

}  // namespace
}  // namespace kvc::store_tests
