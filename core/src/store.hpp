// One store instance created from a `stores:` entry: a store plugin's put, get, exists and
// remove, each failure a kvc::Error keeping the plugin's code, "store 'NAME' (plugin P): ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "config.hpp"
#include "kvcache_support/large_bytes.hpp"
#include "offload_versions.hpp"
#include "plugin_registry.hpp"

namespace kvc {

// A value read from a store, as the plugin wrote it into memory that was not cleared first.
using StoredValue = support::LargeBytes;

class Store {
 public:
  // Creates the plugin's instance from the entry's parameters; throws its create error.
  Store(const StoreConfig& config, const LoadedPlugin& plugin, const kvc_host_api* host);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& name() const { return name_; }

  void put(const std::string& key, const void* data, size_t size) const;
  // The value under `key`; NOT_FOUND when there is none.
  StoredValue get(const std::string& key) const;
  bool exists(const std::string& key) const;
  // NOT_FOUND when there is no value under `key`.
  void remove(const std::string& key) const;

  // The versions of the offloads this instance was given, per key (offload.cpp's).
  OffloadVersions& offload_versions() const { return offload_versions_; }

 private:
  std::string name_;
  std::string who_;  // "store 'NAME' (plugin P):", the start of every message
  kvc_store_vtable vtable_;
  void* instance_ = nullptr;
  mutable OffloadVersions offload_versions_;
};

}  // namespace kvc
