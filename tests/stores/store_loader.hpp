// A store plugin loaded from its shared library with dlopen, the way a host would but without
// the core (plugins never link it): the entry point, the store descriptor, and instances
// whose calls return their status code and message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvcache/kvcache_plugin.h"

namespace kvc::store_tests {

using Params = std::vector<std::pair<std::string, std::string>>;

struct Outcome {
  int32_t code = KVC_OK;
  std::string message;  // empty on success
};

// What a get brought back, and how it used the reserve callback.
struct GetResult {
  Outcome outcome;
  std::vector<unsigned char> value;
  int reserve_calls = 0;
  size_t reserved_size = 0;
};

class StorePlugin {
 public:
  // Loads `path`; throws std::runtime_error when it is no loadable store plugin.
  explicit StorePlugin(const std::string& path);
  ~StorePlugin();
  StorePlugin(const StorePlugin&) = delete;
  StorePlugin& operator=(const StorePlugin&) = delete;

  const std::string& name() const { return name_; }
  const kvc_store_vtable& vtable() const { return vtable_; }
  const kvc_host_api* host() const { return &host_; }

 private:
  void* library_ = nullptr;
  std::string name_;
  kvc_store_vtable vtable_{};
  kvc_host_api host_{};
};

// One instance of a store, destroyed with this object.
class Store {
 public:
  // Creates an instance; check ok() (and creation()) before using it.
  Store(const StorePlugin& plugin, const Params& params);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  bool ok() const { return instance_ != nullptr; }
  const Outcome& creation() const { return creation_; }

  Outcome put(const std::string& key, const void* data, size_t size);
  Outcome put(const std::string& key, const std::vector<unsigned char>& value) {
    return put(key, value.data(), value.size());
  }
  GetResult get(const std::string& key);
  // A get whose reserve callback returns NULL.
  Outcome get_without_memory(const std::string& key);
  Outcome exists(const std::string& key, bool& exists);
  Outcome remove(const std::string& key);

 private:
  const kvc_store_vtable& vtable_;
  void* instance_ = nullptr;
  Outcome creation_;
};

}  // namespace kvc::store_tests
