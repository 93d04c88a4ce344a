#include "context.hpp"

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/filesystem.hpp>
#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "kvcache/kvcache_error.hpp"
#include "quote.hpp"

namespace kvc {
namespace {

int arena_threads(std::optional<int32_t> configured) {
  return configured.value_or(0) > 0 ? *configured : tbb::task_arena::automatic;
}

Error no_such_plugin_path(const std::string& path) {
  return Error(KVC_ERR_NOT_FOUND, "plugins.paths: " + quote(path) + " does not exist");
}

std::vector<std::string> split_path_list(const char* text) {
  std::vector<std::string> parts;
  if (!text) return parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ':')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

}  // namespace

std::string default_plugin_folder() {
  boost::filesystem::path library = boost::dll::this_line_location();
  return (library.parent_path() / "kvcache" / "plugins").string();
}

Context::Context(Config config)
    : config_(std::move(config)),
      arena_(arena_threads(config_.threads)),
      host_(std::make_unique<HostServices>(logger_, arena_)),
      plugins_(std::make_unique<PluginRegistry>(host_->api(), logger_)) {
  load_default_plugins();
  create_stores();
}

void Context::create_stores() {
  if (!config_.stores) return;
  for (const StoreConfig& entry : *config_.stores) {
    const LoadedPlugin* plugin = plugins_->find(KVC_PLUGIN_STORE, entry.plugin);
    if (!plugin) {
      throw Error(KVC_ERR_NOT_FOUND, "stores." + printable(entry.name) +
                                         ".plugin: no store plugin " + quote(entry.plugin) +
                                         " is loaded (loaded: " +
                                         plugins_->names_of(KVC_PLUGIN_STORE) + ")");
    }
    stores_.push_back(std::make_unique<Store>(entry, *plugin, host_->api()));
  }
}

const Store& Context::store(const std::string& name) const {
  for (const std::unique_ptr<Store>& store : stores_) {
    if (store->name() == name) return *store;
  }
  std::string names;
  for (const std::unique_ptr<Store>& store : stores_) {
    names += (names.empty() ? "" : ", ") + quote(store->name());
  }
  throw Error(KVC_ERR_NOT_FOUND, "no store named " + quote(name) + " (configured: " +
                                     (names.empty() ? "none" : names) + ")");
}

void Context::load_default_plugins() {
  plugins_->load_folder(default_plugin_folder());
  for (const std::string& folder : split_path_list(std::getenv("KVC_PLUGIN_PATH"))) {
    plugins_->load_folder(folder);
  }
  for (const std::string& path : config_.plugin_paths) {
    boost::system::error_code ec;
    if (boost::filesystem::is_directory(path, ec)) {
      plugins_->load_folder(path);
    } else if (boost::filesystem::exists(path, ec)) {
      plugins_->load_library(path);
    } else {
      throw no_such_plugin_path(path);
    }
  }
}

void Context::check_cache_config(const Config& cache_config) const {
  const int32_t threads = cache_config.threads.value_or(0);
  if (cache_config.threads && threads != config_.threads.value_or(0)) {
    const std::string ours =
        config_.threads.value_or(0) > 0 ? std::to_string(*config_.threads) : "all cores";
    throw Error(KVC_ERR_CONFIG, "threads: " + std::to_string(threads) +
                                    " differs from the context's (" + ours +
                                    "); a cache runs on its context's threads, set by "
                                    "kvc_context_create");
  }
  const std::vector<std::string>& ours = config_.plugin_paths;
  for (const std::string& path : cache_config.plugin_paths) {
    if (std::find(ours.begin(), ours.end(), path) != ours.end()) continue;
    boost::system::error_code ec;
    if (!boost::filesystem::exists(path, ec)) throw no_such_plugin_path(path);
    throw Error(KVC_ERR_CONFIG, "plugins.paths: " + quote(path) +
                                    " is not one of the context's; plugins are loaded by "
                                    "kvc_context_create or kvc_context_load_plugin");
  }
  const std::vector<StoreConfig> no_stores;
  if (cache_config.stores && *cache_config.stores != config_.stores.value_or(no_stores)) {
    throw Error(KVC_ERR_CONFIG,
                "stores: differs from the context's; stores are created with the context, by "
                "kvc_context_create");
  }
}

}  // namespace kvc
