// Failovers of a Redis Cluster of the test's own (3 masters, each with a replica;
// cluster-node-timeout 500 ms), driven through the C API's offload and restore: a master
// killed right after it acknowledged an offload (wait_replicas on: the value survives), a
// promotion that lost the newest value (refused as stale, never returned), and the first call
// after a promotion (it succeeds: the store reloads its slot map and goes to the new master).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../test_support.hpp"
#include "fault_support.hpp"
#include "redis_client.hpp"
#include "sequences.hpp"

namespace kvc::store_tests {
namespace {

constexpr int kPairs = 3;  // node p is the first master of slots range p, node p + 3 its replica

// Polls `done` every 50 ms for up to 30 s; false when it never held.
template <class Done>
bool eventually(Done&& done) {
  for (int tries = 0; tries < 600; ++tries) {
    try {
      if (done()) return true;
    } catch (const std::runtime_error&) {
      // a node that is not up yet
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class ReplicatedCluster {
 public:
  ReplicatedCluster() {
    for (int i = 0; i < 2 * kPairs; ++i) {
      servers_.push_back(std::make_unique<RedisServer>(std::vector<std::string>{
          "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
          "--cluster-node-timeout", "500"}));
    }
    const char* ranges[kPairs][2] = {{"0", "5460"}, {"5461", "10922"}, {"10923", "16383"}};
    for (int i = 0; i < 2 * kPairs; ++i) ids_.push_back(client(i).text({"CLUSTER", "MYID"}));
    for (int p = 0; p < kPairs; ++p) {
      require_ok(client(p).text({"CLUSTER", "ADDSLOTSRANGE", ranges[p][0], ranges[p][1]}));
      master_[p] = p;
    }
    for (int i = 1; i < 2 * kPairs; ++i) {
      require_ok(client(0).text({"CLUSTER", "MEET", "127.0.0.1",
                                 std::to_string(servers_[i]->port())}));
    }
    require(eventually([&] {
              for (int i = 0; i < 2 * kPairs; ++i) {
                if (!has(client(i).text({"CLUSTER", "INFO"}), "cluster_known_nodes:6")) {
                  return false;
                }
              }
              return true;
            }),
            "the nodes did not meet");
    for (int p = 0; p < kPairs; ++p) {
      require_ok(client(p + kPairs).text({"CLUSTER", "REPLICATE", ids_[p]}));
    }
    for (int p = 0; p < kPairs; ++p) wait_until_in_sync(p);
  }

  RedisClient client(int node) const { return RedisClient("127.0.0.1", servers_[node]->port()); }
  RedisServer& server(int node) { return *servers_[node]; }
  int master(int pair) const { return master_[pair]; }
  int replica(int pair) const { return master_[pair] == pair ? pair + kPairs : pair; }

  // The nodes, as the store's seeds.
  std::string nodes() const {
    std::string list;
    for (const auto& server : servers_) list += (list.empty() ? "" : ",") + server->address();
    return list;
  }

  // A key whose manifest (under `prefix`) lies in the slots of pair `pair`.
  std::string key_in(int pair, const std::string& prefix, const std::string& stem) const {
    for (int i = 0;; ++i) {
      const std::string key = stem + std::to_string(i);
      const long slot =
          std::stol(client(master(0)).text({"CLUSTER", "KEYSLOT", manifest_key_of(prefix, key)}));
      if ((slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2) == pair) return key;
    }
  }

  // After the master of `pair` was killed: waits until its replica is master and every live
  // node sees it so; the pair's roles swap.
  void wait_for_promotion(int pair) {
    const int promoted = replica(pair);
    const int dead = master(pair);
    require(eventually([&] {
              for (int i = 0; i < 2 * kPairs; ++i) {
                if (i == dead) continue;
                if (!sees_as_master(i, promoted) ||
                    !has(client(i).text({"CLUSTER", "INFO"}), "cluster_state:ok")) {
                  return false;
                }
              }
              return true;
            }),
            "the replica was not promoted");
    master_[pair] = promoted;
  }

  // Waits until the pair's replica has every write its master has made so far. (WAIT on a
  // connection of the test's own would not do: it counts only that connection's writes.)
  void wait_until_replicated(int pair) {
    const long written = offset_in(client(master(pair)).text({"INFO", "replication"}),
                                   "master_repl_offset:");
    require(eventually([&] {
              return offset_in(client(replica(pair)).text({"INFO", "replication"}),
                               "slave_repl_offset:") >= written;
            }),
            "a replica did not receive its master's writes");
  }

  // Restarts the pair's killed node (it rejoins as its replica) and waits until it is in sync.
  void rejoin(int pair) {
    server(replica(pair)).restart();
    wait_until_in_sync(pair);
  }

 private:
  static void require(bool ok, const char* what) {
    if (!ok) throw std::runtime_error(std::string("replicated cluster: ") + what);
  }
  static void require_ok(const std::string& reply) {
    if (reply != "OK") throw std::runtime_error("replicated cluster setup: " + reply);
  }
  static long offset_in(const std::string& info, const std::string& field) {
    const size_t at = info.find(field);
    if (at == std::string::npos) throw std::runtime_error("INFO replication has no " + field);
    return std::stol(info.substr(at + field.size()));
  }
  bool sees_as_master(int observer, int node) const {
    const std::string nodes = client(observer).text({"CLUSTER", "NODES"});
    const size_t line = nodes.find(ids_[node]);
    if (line == std::string::npos) return false;
    const std::string fields = nodes.substr(line, nodes.find('\n', line) - line);
    return has(fields, "master") && !has(fields, "fail");
  }
  void wait_until_in_sync(int pair) {
    require(eventually([&] {
              const std::string info = client(replica(pair)).text({"INFO", "replication"});
              return has(info, "role:slave") && has(info, "master_link_status:up") &&
                     has(client(master(pair)).text({"CLUSTER", "INFO"}), "cluster_state:ok");
            }),
            "a replica did not reach its master");
  }

  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<std::string> ids_;
  int master_[kPairs] = {};
};

kvt::ContextPtr context_on(const ReplicatedCluster& cluster, const std::string& prefix,
                           const std::string& extra = "") {
  const std::string yaml = "stores:\n  remote: { plugin: redis, params: { nodes: '" +
                           cluster.nodes() + "', key_prefix: '" + prefix + "'" + extra +
                           " } }\n";
  return kvt::make_context(yaml.c_str());
}

std::string message_of(kvc_status* status) { return kvt::Status{status}.describe(); }

// Rounds of kill-after-acknowledgement: KVC_TEST_FAILOVER_ROUNDS, else 3 (one per master).
int failover_rounds() {
  const char* rounds = std::getenv("KVC_TEST_FAILOVER_ROUNDS");
  return rounds != nullptr ? std::atoi(rounds) : kPairs;
}

TEST_SUITE("redis_faults") {
  TEST_CASE("failover: with wait_replicas 1, an offload acknowledged right before its master "
            "is killed restores as the new value, bit for bit") {
    ReplicatedCluster cluster;
    kvt::ContextPtr context = context_on(cluster, "durable:", ", wait_replicas: 1");
    kvt::CachePtr cache = cache_in(context.get());
    const int rounds = failover_rounds();
    int kept = 0;
    for (int round = 0; round < rounds; ++round) {
      CAPTURE(round);
      const int pair = round % kPairs;
      const std::string key = cluster.key_in(pair, "durable:", "seq" + std::to_string(round));
      fill(cache.get(), 0, 256, 100 + static_cast<uint32_t>(round));  // the old value, 4 MiB
      KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "remote", key.c_str()));
      fill(cache.get(), 0, 256, 200 + static_cast<uint32_t>(round));  // the new one
      const std::vector<unsigned char> newer = image_of(cache.get(), 0);
      KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "remote", key.c_str()));
      cluster.server(cluster.master(pair)).kill();  // right after the acknowledgement

      cluster.wait_for_promotion(pair);
      KVT_REQUIRE_OK(kvc_seq_restore(cache.get(), 0, "remote", key.c_str()));
      kept += image_of(cache.get(), 0) == newer;
      KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 0));
      if (round + 1 < rounds) cluster.rejoin(pair);
    }
    MESSAGE(kept << " of " << rounds << " offloads acknowledged right before their master's "
                     "kill restored as the new value");
    CHECK(kept == rounds);
  }

  TEST_CASE("failover: a promoted replica that never received the newest offload is refused "
            "as stale, naming the store and key; the first call after the promotion works") {
    ReplicatedCluster cluster;
    kvt::ContextPtr context = context_on(cluster, "stale:");
    kvt::CachePtr cache = cache_in(context.get());
    const int pair = 1;
    const std::string key = cluster.key_in(pair, "stale:", "seq");
    fill(cache.get(), 0, 256, 7);
    const std::vector<unsigned char> older = image_of(cache.get(), 0);
    KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "remote", key.c_str()));
    cluster.wait_until_replicated(pair);

    // The replica stops and its link is cut, so the next offload reaches the master only.
    RedisServer& replica = cluster.server(cluster.replica(pair));
    replica.pause();
    REQUIRE(cluster.client(cluster.master(pair)).text({"CLIENT", "KILL", "TYPE", "replica"}) ==
            "1");
    fill(cache.get(), 0, 256, 8);
    KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "remote", key.c_str()));
    cluster.server(cluster.master(pair)).kill();
    replica.resume();
    cluster.wait_for_promotion(pair);

    // The first call to the pair's slots after the promotion: the store's map still names the
    // dead master, so it reloads the map and goes to the new one.
    kvc_status* status = kvc_seq_restore(cache.get(), 0, "remote", key.c_str());
    const std::string message = message_of(status);
    INFO(message);
    CHECK(has(message, "IO: "));
    CHECK(has(message, "stale"));
    CHECK(has(message, "store 'remote'"));
    CHECK(has(message, "'" + key + "'"));
    CHECK_FALSE(has_sequence(cache.get(), 0));

    // What the store holds is the older value: another context, which never offloaded under
    // the key, restores it.
    kvt::ContextPtr other = context_on(cluster, "stale:");
    kvt::CachePtr reader = cache_in(other.get());
    KVT_REQUIRE_OK(kvc_seq_restore(reader.get(), 0, "remote", key.c_str()));
    CHECK(image_of(reader.get(), 0) == older);
  }

  TEST_CASE("failover: the first call after a promotion, to a key whose master died, succeeds") {
    ReplicatedCluster cluster;
    kvt::ContextPtr context = context_on(cluster, "first:", ", wait_replicas: 1");
    kvt::CachePtr cache = cache_in(context.get());
    const int pair = 2;
    const std::string key = cluster.key_in(pair, "first:", "seq");
    fill(cache.get(), 0, 64, 9);
    const std::vector<unsigned char> image = image_of(cache.get(), 0);
    KVT_REQUIRE_OK(kvc_seq_offload(cache.get(), 0, "remote", key.c_str()));
    cluster.server(cluster.master(pair)).kill();
    cluster.wait_for_promotion(pair);
    KVT_REQUIRE_OK(kvc_seq_restore(cache.get(), 0, "remote", key.c_str()));
    CHECK(image_of(cache.get(), 0) == image);
  }

  TEST_CASE("wait_replicas: a put fewer replicas acknowledge is IO saying how many, and the "
            "offload keeps the sequence bit for bit") {
    RedisServer server;  // no replicas
    const std::string yaml =
        "stores:\n  remote: { plugin: redis, params: { host: 127.0.0.1, port: " +
        std::to_string(server.port()) + ", wait_replicas: 1, wait_timeout_ms: 100 } }\n";
    kvt::ContextPtr context = kvt::make_context(yaml.c_str());
    kvt::CachePtr cache = cache_in(context.get());
    fill(cache.get(), 0, 64, 10);
    const std::vector<unsigned char> before = image_of(cache.get(), 0);
    kvc_status* status = kvc_seq_offload(cache.get(), 0, "remote", "seq");
    const std::string message = message_of(status);
    INFO(message);
    CHECK(has(message, "IO: "));
    CHECK(has(message, "0 of the 1 replicas"));
    CHECK(has(message, "'seq'"));
    REQUIRE(has_sequence(cache.get(), 0));
    CHECK(image_of(cache.get(), 0) == before);
  }
}

}  // namespace
}  // namespace kvc::store_tests
