// The connections to one node: at most `settings.pool` open at once, idle ones reused; a
// caller wanting one while all are busy waits (up to the timeout). Connecting happens outside
// the lock, so one unreachable node does not hold up calls that have a connection.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "connection.hpp"
#include "settings.hpp"

namespace kvc::plugin::redis {

class NodePool {
 public:
  NodePool(std::string address, const Settings& settings)
      : address_(std::move(address)), settings_(settings) {}

  // A connection lent to one caller; back to the pool when it goes, discarded when broken.
  class Lease {
   public:
    Lease(NodePool& pool, std::unique_ptr<Connection> connection)
        : pool_(&pool), connection_(std::move(connection)) {}
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_ != nullptr && connection_ != nullptr) pool_->give_back(std::move(connection_));
    }
    Connection& operator*() const { return *connection_; }
    Connection* operator->() const { return connection_.get(); }

   private:
    NodePool* pool_;
    std::unique_ptr<Connection> connection_;
  };

  Lease acquire();
  const std::string& address() const { return address_; }

 private:
  void give_back(std::unique_ptr<Connection> connection) noexcept;

  const std::string address_;
  const Settings& settings_;
  std::mutex mutex_;
  std::condition_variable released_;
  std::vector<std::unique_ptr<Connection>> idle_;
  size_t open_ = 0;  // idle and lent
};

}  // namespace kvc::plugin::redis
