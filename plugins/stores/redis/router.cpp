#include "router.hpp"

#include <vector>

#include "common/store_support.hpp"

namespace kvc::plugin::redis {

Router::Router(const Settings& settings) : settings_(settings) {}

NodePool& Router::pool(const std::string& address) {
  std::lock_guard<std::mutex> lock(pools_mutex_);
  std::unique_ptr<NodePool>& entry = pools_[address];
  if (entry == nullptr) entry = std::make_unique<NodePool>(address, settings_);
  return *entry;
}

std::string Router::node_for(int slot) {
  {
    std::lock_guard<std::mutex> lock(map_mutex_);
    if (!map_stale_ && !map_.node(slot).empty()) return map_.node(slot);
  }
  refresh();
  std::lock_guard<std::mutex> lock(map_mutex_);
  if (map_.node(slot).empty()) {
    throw Error(KVC_ERR_IO, "no node of the cluster serves hash slot " +
                                      decimal(static_cast<uint64_t>(slot)) +
                                      " (is cluster_state ok?)");
  }
  return map_.node(slot);
}

void Router::refresh() {
  std::lock_guard<std::mutex> refreshing(refresh_mutex_);
  std::vector<std::string> candidates = settings_.nodes;
  {
    std::lock_guard<std::mutex> lock(map_mutex_);
    if (!map_stale_) return;  // another thread refreshed it meanwhile
    for (const std::string& node : map_.nodes()) {
      if (!node.empty()) candidates.push_back(node);
    }
  }
  std::string problems;
  for (const std::string& address : candidates) {
    std::string problem;
    try {
      NodePool::Lease lease = pool(address).acquire();
      Reply reply = lease->call({"CLUSTER", "SLOTS"});
      if (is_error(*reply)) {
        fail_on_error(text_of(*reply), address, settings_.user(), "CLUSTER SLOTS");
      }
      SlotMap loaded;
      if (loaded.load(*reply, address, problem)) {
        std::lock_guard<std::mutex> lock(map_mutex_);
        map_ = std::move(loaded);
        map_stale_ = false;
        return;
      }
      problem = address + ": " + problem;
    } catch (const Error& e) {
      if (e.code() == KVC_ERR_CONFIG) throw;  // refused credentials: no other node will differ
      problem = e.what();
    }
    problems += (problems.empty() ? "" : "; ") + problem;
  }
  throw Error(KVC_ERR_IO, "no cluster node answered CLUSTER SLOTS (" + problems + ")");
}

Reply Router::ask(const std::string& address, std::initializer_list<std::string_view> command) {
  if (!settings_.cluster) cluster_node_as_single();
  NodePool::Lease lease = pool(address).acquire();
  CommandBatch batch;
  batch.add({"ASKING"});
  batch.add(command);
  lease->send(batch);
  const Reply asking = lease->receive();
  Reply reply = lease->receive();
  if (is_error(*asking)) {
    throw Error(KVC_ERR_IO,
                      address + ": ASKING refused: " + printable(text_of(*asking), 200));
  }
  return reply;
}

void Router::moved(const Redirect& redirect) {
  std::lock_guard<std::mutex> lock(map_mutex_);
  map_.set(redirect.slot, redirect.address);
  // Slots seldom move alone (resharding, failover): the next call reloads the whole map.
  map_stale_ = true;
}

void Router::forget_map() {
  std::lock_guard<std::mutex> lock(map_mutex_);
  map_stale_ = true;
}

std::string Router::new_owner(int slot, const std::string& failed,
                              std::chrono::steady_clock::time_point started) {
  const auto elapsed = std::chrono::steady_clock::now() - started;
  if (elapsed >= std::chrono::milliseconds(settings_.timeout_ms)) return "";
  try {
    refresh();
  } catch (const Error&) {
    return "";  // the call's own error says more than that no node answered
  }
  std::lock_guard<std::mutex> lock(map_mutex_);
  const std::string& owner = map_.node(slot);
  return owner == failed ? "" : owner;
}

void Router::cluster_node_as_single() {
  throw Error(KVC_ERR_CONFIG, settings_.nodes.front() +
                                        " is a Redis Cluster node: give it in params.nodes");
}

void Router::too_many(const Redirect& last) {
  throw Error(KVC_ERR_IO, "hash slot " + decimal(static_cast<uint64_t>(last.slot)) +
                                    " was redirected " + decimal(kMaxRedirects) +
                                    " times (last to " + last.address +
                                    "): the cluster is resharding or misconfigured");
}

}  // namespace kvc::plugin::redis
