// A kvc_context: configuration, logger, TBB arena, host API and plugin registry.
#pragma once

#include <memory>
#include <string>
#include <tbb/task_arena.h>

#include "config.hpp"
#include "host_api.hpp"
#include "logger.hpp"
#include "plugin_registry.hpp"
#include "store.hpp"

namespace kvc {

class Context {
 public:
  explicit Context(Config config);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Config& config() const { return config_; }
  // A cache's configuration may repeat this context's `threads`, `plugins.paths` and `stores`
  // (one file for both) but not change them, which only kvc_context_create can: throws
  // KVC_ERR_CONFIG naming the key, or NOT_FOUND for a plugin path that does not exist.
  void check_cache_config(const Config& cache_config) const;
  Logger& logger() { return logger_; }
  const HostServices& host() const { return *host_; }
  PluginRegistry& plugins() { return *plugins_; }
  // The store configured under `name`; NOT_FOUND naming it and listing the configured ones.
  const Store& store(const std::string& name) const;

 private:
  void load_default_plugins();
  void create_stores();

  Config config_;
  Logger logger_;
  tbb::task_arena arena_;
  std::unique_ptr<HostServices> host_;
  std::unique_ptr<PluginRegistry> plugins_;
  std::vector<std::unique_ptr<Store>> stores_;  // after plugins_: destroyed before the libraries
};

// The folder next to libkvcache where built-in plugins live: "<libdir>/kvcache/plugins".
std::string default_plugin_folder();

}  // namespace kvc
