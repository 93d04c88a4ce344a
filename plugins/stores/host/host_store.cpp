// The `host` store: values in this process's memory, at most `capacity` bytes of them, the
// least recently used (put or get) evicted to make room for a new one.
#include <cstddef>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvcache_support/large_bytes.hpp"
#include "common/store_support.hpp"

namespace kvc::plugin {
namespace {

// Values are immutable once stored, so a get copies one out after releasing the lock.
using Value = std::shared_ptr<const kvc::support::LargeBytes>;

class HostStore {
 public:
  static constexpr const char* kName = "host";
  static constexpr const char* kLabel = "host store";
  static constexpr const char* kParams[] = {"capacity"};

  HostStore(const StoreParams& params, const kvc_host_api* /*host*/)
      : capacity_(params.byte_size("capacity", size_t{1} << 30)) {}

  void put(const std::string& key, const void* data, size_t size) {
    if (size > capacity_) {
      fail(KVC_ERR_OUT_OF_MEMORY, "value of %zu bytes exceeds the store's capacity of %zu",
           size, capacity_);
    }
    auto bytes = kvc::support::LargeBytes::allocate(size);
    if (bytes.data() == nullptr) {
      fail(KVC_ERR_OUT_OF_MEMORY, "no memory for a value of %zu bytes", size);
    }
    if (size > 0) std::memcpy(bytes.data(), data, size);
    Value value = std::make_shared<const kvc::support::LargeBytes>(std::move(bytes));
    std::vector<Value> released;  // freed after the lock
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = index_.find(key); found != index_.end()) {
      released.push_back(erase(found));
    }
    while (used_ + size > capacity_) released.push_back(erase(index_.find(by_use_.back().first)));
    by_use_.emplace_front(key, std::move(value));
    try {
      index_.emplace(key, by_use_.begin());
    } catch (...) {
      by_use_.pop_front();
      throw;
    }
    used_ += size;
  }

  void get(const std::string& key, ValueBuffer& buffer) {
    Value value;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto found = index_.find(key);
      if (found == index_.end()) not_found(key);
      by_use_.splice(by_use_.begin(), by_use_, found->second);
      value = found->second->second;
    }
    void* out = buffer.reserve(value->size());
    if (value->size() > 0) std::memcpy(out, value->data(), value->size());
  }

  bool exists(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return index_.count(key) != 0;
  }

  void remove(const std::string& key) {
    Value released;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = index_.find(key);
    if (found == index_.end()) not_found(key);
    released = erase(found);
  }

 private:
  using Entries = std::list<std::pair<std::string, Value>>;  // most recently used first

  [[noreturn]] static void not_found(const std::string& key) {
    throw Error(KVC_ERR_NOT_FOUND, "no value under key " + quoted(key));
  }

  // Removes an entry (the lock held) and hands its value back to be freed outside the lock.
  Value erase(std::unordered_map<std::string, Entries::iterator>::iterator found) {
    Value value = std::move(found->second->second);
    used_ -= value->size();
    by_use_.erase(found->second);
    index_.erase(found);
    return value;
  }

  const size_t capacity_;
  std::mutex mutex_;
  Entries by_use_;
  std::unordered_map<std::string, Entries::iterator> index_;
  size_t used_ = 0;  // bytes of the values held
};

}  // namespace
}  // namespace kvc::plugin

KVC_STORE_PLUGIN(kvc::plugin::HostStore);
