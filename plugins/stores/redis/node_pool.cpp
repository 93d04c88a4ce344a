#include "node_pool.hpp"

#include <chrono>

#include "common/store_support.hpp"

namespace kvc::plugin::redis {

NodePool::Lease NodePool::acquire() {
  std::vector<std::unique_ptr<Connection>> dead;  // closed after the lock
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(settings_.timeout_ms);
    while (true) {
      while (!idle_.empty()) {
        std::unique_ptr<Connection> connection = std::move(idle_.back());
        idle_.pop_back();
        if (connection->alive_when_idle()) return Lease(*this, std::move(connection));
        dead.push_back(std::move(connection));
        --open_;
      }
      if (open_ < settings_.pool) break;
      if (released_.wait_until(lock, deadline) == std::cv_status::timeout &&
          idle_.empty() && open_ >= settings_.pool) {
        throw Error(KVC_ERR_IO, address_ + ": all " + decimal(settings_.pool) +
                                          " connections stayed busy for " +
                                          decimal(static_cast<uint64_t>(settings_.timeout_ms)) +
                                          " ms");
      }
    }
    ++open_;
  }
  try {
    return Lease(*this, std::make_unique<Connection>(address_, settings_));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    --open_;
    released_.notify_one();
    throw;
  }
}

void NodePool::give_back(std::unique_ptr<Connection> connection) noexcept {
  std::unique_ptr<Connection> closed;  // after the lock
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!connection->broken()) {
      try {
        idle_.push_back(std::move(connection));
      } catch (...) {
      }
    }
    if (connection != nullptr) {
      closed = std::move(connection);
      --open_;
    }
  }
  released_.notify_one();
}

}  // namespace kvc::plugin::redis
