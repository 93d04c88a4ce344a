#include "context.hpp"

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/filesystem.hpp>
#include <cstdlib>
#include <sstream>

#include "error.hpp"
#include "quote.hpp"

namespace kvc {
namespace {

int arena_threads(int32_t configured) {
  return configured > 0 ? configured : tbb::task_arena::automatic;
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
      throw Error(KVC_ERR_NOT_FOUND, "plugins.paths: " + quote(path) + " does not exist");
    }
  }
}

}  // namespace kvc
