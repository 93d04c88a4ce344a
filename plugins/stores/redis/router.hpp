// Which node a command goes to. One node: always that node. Redis Cluster: the master of the
// key's slot, from a slot map loaded from the seeds (CLUSTER SLOTS) at first use and again
// after a connection error or a -MOVED; -MOVED and -ASK are followed, at most
// kMaxRedirects times per call. A connection failure to a slot's master (e.g. one that died
// and whose replica was promoted) reloads the map at once from a live node and, when another
// node now serves the slot, runs the call there once, if the call is still within timeout_ms.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "connection.hpp"
#include "node_pool.hpp"
#include "reply.hpp"
#include "settings.hpp"
#include "slot_map.hpp"

namespace kvc::plugin::redis {

class Router {
 public:
  explicit Router(const Settings& settings);

  // Runs op(Connection&, bool asking) on the node serving `key` and returns what it returns.
  // op throws Redirect for a -MOVED or -ASK reply, once every reply it waits for is read.
  template <class Op>
  auto run(const std::string& key, Op&& op) -> decltype(op(std::declval<Connection&>(), false));

  // ASKING, then `command`, on the node at `address` (an -ASK's): the reply to `command`.
  Reply ask(const std::string& address, std::initializer_list<std::string_view> command);

 private:
  static constexpr int kMaxRedirects = 5;

  NodePool& pool(const std::string& address);
  std::string node_for(int slot);
  void refresh();
  void moved(const Redirect& redirect);
  void forget_map();
  // After a connection failure to `failed` within a call started at `started`: the slot's
  // master in a map reloaded now, or "" when none answered, it is still `failed`, or the call
  // has used up its timeout.
  std::string new_owner(int slot, const std::string& failed,
                        std::chrono::steady_clock::time_point started);
  [[noreturn]] void too_many(const Redirect& last);
  // A redirection from the one node of a store without params.nodes: CONFIG.
  [[noreturn]] void cluster_node_as_single();

  const Settings& settings_;
  std::mutex pools_mutex_;
  std::unordered_map<std::string, std::unique_ptr<NodePool>> pools_;
  std::mutex map_mutex_;
  SlotMap map_;
  bool map_stale_ = true;
  std::mutex refresh_mutex_;  // one CLUSTER SLOTS at a time
};

template <class Op>
auto Router::run(const std::string& key, Op&& op)
    -> decltype(op(std::declval<Connection&>(), false)) {
  if (!settings_.cluster) {
    NodePool& node = pool(settings_.nodes.front());
    NodePool::Lease lease = node.acquire();
    try {
      return op(*lease, false);
    } catch (const Redirect&) {
      cluster_node_as_single();
    }
  }
  const auto started = std::chrono::steady_clock::now();
  const int slot = key_slot(key);
  std::string address = node_for(slot);
  bool asking = false;
  bool rerouted = false;
  for (int redirects = 0;; ++redirects) {
    bool connection_failed = true;
    try {
      NodePool::Lease lease = pool(address).acquire();
      connection_failed = false;
      try {
        return op(*lease, asking);
      } catch (const Error&) {
        connection_failed = lease->broken();
        throw;
      }
    } catch (const Redirect& redirect) {
      if (redirects == kMaxRedirects) too_many(redirect);
      if (!redirect.ask) moved(redirect);
      address = redirect.address;
      asking = redirect.ask;
    } catch (const Error& e) {
      if (!connection_failed || e.code() != KVC_ERR_IO) throw;
      // The node may be gone or have lost the slot: ask a live node which master serves it.
      forget_map();
      if (rerouted || asking) throw;
      const std::string owner = new_owner(slot, address, started);
      if (owner.empty()) throw;
      address = owner;
      rerouted = true;
    }
  }
}

}  // namespace kvc::plugin::redis
