// Faults of a Redis Cluster of the test's own (3 masters): a slot moved to another node after
// the store mapped it (-MOVED), and a slot in the middle of a migration (-ASK).
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fault_support.hpp"
#include "redis_client.hpp"

namespace kvc::store_tests {
namespace {

class Cluster {
 public:
  Cluster() {
    for (int i = 0; i < 3; ++i) {
      servers_.push_back(std::make_unique<RedisServer>(std::vector<std::string>{
          "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
          "--cluster-node-timeout", "5000"}));
      clients_.push_back(std::make_unique<RedisClient>("127.0.0.1", servers_.back()->port()));
    }
    const char* ranges[3][2] = {{"0", "5460"}, {"5461", "10922"}, {"10923", "16383"}};
    for (int i = 0; i < 3; ++i) {
      require_ok(client(i).text({"CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]}));
      ids_.push_back(client(i).text({"CLUSTER", "MYID"}));
    }
    for (int i = 1; i < 3; ++i) {
      require_ok(client(0).text({"CLUSTER", "MEET", "127.0.0.1",
                                 std::to_string(servers_[i]->port())}));
    }
    for (int tries = 0; tries < 400 && !all_ok(); ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!all_ok()) throw std::runtime_error("the test cluster did not reach cluster_state:ok");
  }

  RedisClient& client(int node) { return *clients_[node]; }
  const RedisServer& server(int node) const { return *servers_[node]; }
  const std::string& id(int node) const { return ids_[node]; }
  // The node serving `slot`, by the ranges given above.
  static int owner_at_start(long slot) { return slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2; }

  long slot_of(const std::string& key) {
    return std::stol(client(0).text({"CLUSTER", "KEYSLOT", key}));
  }

  // Moves `slot` from node `from` to node `to` as redis-cli --cluster reshard does: importing
  // and migrating, then MIGRATE of `keys_to_move` of its keys (all when empty), then, when
  // `finish`, the slot assigned to `to` on every node.
  void migrate(long slot, int from, int to, std::vector<std::string> keys_to_move, bool finish) {
    const std::string s = std::to_string(slot);
    require_ok(client(to).text({"CLUSTER", "SETSLOT", s, "IMPORTING", id(from)}));
    require_ok(client(from).text({"CLUSTER", "SETSLOT", s, "MIGRATING", id(to)}));
    if (keys_to_move.empty()) {
      const RedisClient::Reply keys =
          client(from).command({"CLUSTER", "GETKEYSINSLOT", s, "100000"});
      for (size_t i = 0; i < keys->elements; ++i) {
        keys_to_move.emplace_back(keys->element[i]->str, keys->element[i]->len);
      }
    }
    for (const std::string& key : keys_to_move) {
      require_ok(client(from).text(
          {"MIGRATE", "127.0.0.1", std::to_string(server(to).port()), key, "0", "5000"}));
    }
    if (!finish) return;
    for (int node : {to, from, 3 - to - from}) {
      require_ok(client(node).text({"CLUSTER", "SETSLOT", s, "NODE", id(to)}));
    }
  }

  Params params_seeded_by(int node, Params extra = {}) const {
    Params params{{"nodes", server(node).address()}};
    params.insert(params.end(), extra.begin(), extra.end());
    return params;
  }

 private:
  static void require_ok(const std::string& reply) {
    if (reply != "OK" && reply != "NOKEY") throw std::runtime_error("cluster setup: " + reply);
  }
  bool all_ok() {
    for (int i = 0; i < 3; ++i) {
      const std::string info = client(i).text({"CLUSTER", "INFO"});
      if (info.find("cluster_state:ok") == std::string::npos ||
          info.find("cluster_known_nodes:3") == std::string::npos) {
        return false;
      }
    }
    return true;
  }

  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<std::unique_ptr<RedisClient>> clients_;
  std::vector<std::string> ids_;
};

// The error replies of a kind ("MOVED", "ASK") the node has sent (INFO errorstats).
long error_replies(RedisClient& node, const std::string& kind) {
  const std::string stats = node.text({"INFO", "errorstats"});
  const std::string name = "errorstat_" + kind + ":count=";
  const size_t at = stats.find(name);
  return at == std::string::npos ? 0 : std::stol(stats.substr(at + name.size()));
}

// Keys matching `pattern` on the node that have no expiry.
size_t lasting_keys(RedisClient& node, const std::string& pattern) {
  size_t n = 0;
  for (const std::string& key : node.keys(pattern)) n += node.text({"PTTL", key}) == "-1";
  return n;
}

// A key whose manifest lives on `node` at the start.
std::string key_on(Cluster& cluster, int node, const std::string& prefix,
                   const std::string& stem) {
  for (int i = 0;; ++i) {
    const std::string key = stem + std::to_string(i);
    if (Cluster::owner_at_start(cluster.slot_of(manifest_key_of(prefix, key))) == node) return key;
  }
}

TEST_SUITE("redis_faults") {
  TEST_CASE("cluster: a slot moved after the store mapped it is followed (-MOVED); a store "
            "seeded with another node reads the same value") {
    Cluster cluster;
    const Params extra{{"key_prefix", "moved:"}, {"part_bytes", "1000"}};
    Store writer(redis_plugin(), cluster.params_seeded_by(0, extra));
    REQUIRE(writer.ok());
    const std::string key = key_on(cluster, 1, "moved:", "k");
    const long slot = cluster.slot_of(manifest_key_of("moved:", key));
    const std::vector<unsigned char> value = bytes_of(10000, 10);  // 10 parts
    const Outcome put = writer.put(key, value);
    INFO("put: " << put.message);
    REQUIRE(put.code == KVC_OK);
    CHECK(cluster.client(1).keys("moved:*").size() == 11);

    cluster.migrate(slot, 1, 2, {}, true);
    CHECK(cluster.client(1).keys("moved:*").empty());
    CHECK(cluster.client(2).keys("moved:*").size() == 11);
    const long moved_before = error_replies(cluster.client(1), "MOVED");
    const GetResult got = writer.get(key);  // its map still says node 1
    INFO("get: " << got.outcome.message);
    REQUIRE(got.outcome.code == KVC_OK);
    CHECK(got.value == value);
    CHECK(error_replies(cluster.client(1), "MOVED") == moved_before + 1);  // followed, once

    Store reader(redis_plugin(), cluster.params_seeded_by(2, extra));
    const GetResult read = reader.get(key);
    INFO("get through node 2: " << read.outcome.message);
    REQUIRE(read.outcome.code == KVC_OK);
    CHECK(read.value == value);
    const std::vector<unsigned char> replaced = bytes_of(2500, 11);
    REQUIRE(writer.put(key, replaced).code == KVC_OK);
    CHECK(reader.get(key).value == replaced);
    CHECK(lasting_keys(cluster.client(2), "moved:*") == 4);  // the 10 old parts expire
    REQUIRE(reader.remove(key).code == KVC_OK);
    CHECK(lasting_keys(cluster.client(2), "moved:*") == 0);
  }

  TEST_CASE("cluster: a value half migrated (-ASK) is read whole from both nodes") {
    Cluster cluster;
    const Params extra{{"key_prefix", "ask:"}, {"part_bytes", "1000"}};
    Store store(redis_plugin(), cluster.params_seeded_by(0, extra));
    REQUIRE(store.ok());
    const std::string key = key_on(cluster, 2, "ask:", "k");
    const std::string manifest = manifest_key_of("ask:", key);
    const long slot = cluster.slot_of(manifest);
    const std::vector<unsigned char> value = bytes_of(10000, 12);
    REQUIRE(store.put(key, value).code == KVC_OK);

    // The manifest and the even parts go to node 0; the odd parts stay on node 2.
    const ManifestFields fields = read_manifest(cluster.client(2).text({"GET", manifest}));
    std::vector<std::string> moved{manifest};
    for (uint64_t i = 0; i < fields.parts; i += 2) {
      moved.push_back(part_key_of(manifest, fields, i));
    }
    cluster.migrate(slot, 2, 0, moved, false);
    CHECK(cluster.client(0).keys("ask:*").size() == moved.size());

    const long asked_before = error_replies(cluster.client(2), "ASK");
    const GetResult got = store.get(key);
    INFO("get: " << got.outcome.message);
    REQUIRE(got.outcome.code == KVC_OK);
    CHECK(got.value == value);
    // The manifest, and the even parts: sent to node 0 after node 2's -ASK.
    CHECK(error_replies(cluster.client(2), "ASK") - asked_before >= 1 + 5);
    bool found = false;
    REQUIRE(store.exists(key, found).code == KVC_OK);
    CHECK(found);
  }
}

}  // namespace
}  // namespace kvc::store_tests
