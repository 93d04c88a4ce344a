// Loads plugin libraries with Boost.DLL, checks their descriptors and keeps them loaded for
// the context's lifetime. Thread-safe.
#pragma once

#include <boost/dll/shared_library.hpp>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "kvcache/kvcache_plugin.h"
#include "logger.hpp"

namespace kvc {

struct LoadedPlugin {
  kvc_plugin_kind kind;
  std::string name;
  uint32_t version;
  uint32_t abi_version;  // the plugin ABI it was built against
  std::string path;
  kvc_backend_vtable backend{};  // filled for backends; entries a smaller vtable lacks are NULL
  kvc_policy_vtable policy{};    // filled for policies
  kvc_store_vtable store{};      // filled for stores
};

// Throws kvc::Error for a plugin function's failure: "<who> <what>: <plugin's message>",
// keeping the plugin's status code when it is a known one (KVC_ERR_PLUGIN otherwise).
void check_plugin_call(int32_t code, const kvc_plugin_error& error, const std::string& who,
                       const char* what);

class PluginRegistry {
 public:
  PluginRegistry(const kvc_host_api* host, Logger& logger);
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Loads every plugin of the library at `path`, or none: throws kvc::Error naming the file,
  // ALREADY_EXISTS when it names a plugin twice or one that is already registered.
  void load_library(const std::string& path);
  // Loads every "*.so" in `folder`, skipping (with a warning) those that fail, and (silently)
  // the files whose plugins are loaded already.
  void load_folder(const std::string& folder);

  // NULL when absent. The pointer stays valid for the registry's lifetime.
  const LoadedPlugin* find(kvc_plugin_kind kind, const std::string& name) const;
  size_t count() const;
  const LoadedPlugin& at(size_t index) const;
  // "a, b, c": the names of the plugins of one kind, for error messages.
  std::string names_of(kvc_plugin_kind kind) const;

 private:
  // Whether a plugin was loaded from this very file (under any path).
  bool already_loaded(const std::string& path) const;
  std::vector<LoadedPlugin> read_descriptors(const std::string& path,
                                             const kvc_plugin_descriptor* descriptors,
                                             size_t count) const;

  const kvc_host_api* host_;
  Logger& logger_;
  mutable std::mutex mutex_;
  std::vector<boost::dll::shared_library> libraries_;
  std::deque<LoadedPlugin> plugins_;  // deque: stable addresses for find() and at()
};

}  // namespace kvc
