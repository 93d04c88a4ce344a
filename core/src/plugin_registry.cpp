#include "plugin_registry.hpp"

#include <algorithm>
#include <boost/filesystem.hpp>
#include <cstddef>
#include <cstring>
#include <dlfcn.h>
#include <type_traits>

#include "enums.hpp"
#include "kvcache/kvcache_error.hpp"
#include "files.hpp"
#include "quote.hpp"

namespace kvc {
namespace {

using EntryFunction = std::remove_pointer_t<kvc_plugin_entry_fn>;

Error plugin_error(const std::string& path, const std::string& problem) {
  return Error(KVC_ERR_PLUGIN, "plugin " + quote(path) + ": " + problem);
}

std::string abi_text(uint32_t abi) {
  return std::to_string(abi >> 16) + "." + std::to_string(abi & 0xffffu);
}

// Reads a plugin-written struct of its declared struct_size into a zeroed host-sized one.
// Smaller than the ABI that introduced it requires (`minimum` bytes, ABI `minimum_abi`): refused. Larger than the host's: accepted only when the bytes the
// host does not know are all zero (no entry this host cannot honour).
template <typename Struct>
Struct read_plugin_struct(const std::string& path, const std::string& what, const void* data,
                          size_t minimum, const char* minimum_abi, uint32_t plugin_abi) {
  if (!data) throw plugin_error(path, what + " is missing");
  const uint32_t declared = *static_cast<const uint32_t*>(data);
  if (declared < minimum) {
    throw plugin_error(path, what + " of " + std::to_string(declared) +
                                 " bytes is smaller than ABI " + minimum_abi + "'s " +
                                 std::to_string(minimum));
  }
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = sizeof(Struct); i < declared; ++i) {
    if (bytes[i] != 0) {
      throw plugin_error(path, what + " (built for plugin ABI " + abi_text(plugin_abi) +
                                   ") has " + std::to_string(declared) +
                                   " bytes with entries beyond the " +
                                   std::to_string(sizeof(Struct)) + " this kvcache (ABI " +
                                   abi_text(KVC_PLUGIN_ABI_VERSION) +
                                   ") knows: it needs a newer kvcache");
    }
  }
  Struct copy{};
  std::memcpy(&copy, data, std::min<size_t>(declared, sizeof(Struct)));
  copy.struct_size = sizeof(Struct);
  return copy;
}

void require(bool present, const std::string& path, const std::string& name,
             const char* function) {
  if (!present) {
    throw plugin_error(path, "plugin " + quote(name) + " lacks required function '" + function +
                                 "'");
  }
}

void check_backend(const std::string& path, const std::string& name, const kvc_backend_vtable& v) {
  require(v.create, path, name, "create");
  require(v.destroy, path, name, "destroy");
  require(v.alloc, path, name, "alloc");
  require(v.free, path, name, "free");
  require(v.copy, path, name, "copy");
  require(v.append, path, name, "append");
  require(v.attend, path, name, "attend");
  require(v.compact, path, name, "compact");
  require(v.read_keys, path, name, "read_keys");
  const int async_entries = (v.copy_async != nullptr) + (v.free_async != nullptr) +
                            (v.synchronize != nullptr);
  if (async_entries != 0 && async_entries != 3) {
    throw plugin_error(path, "plugin " + quote(name) +
                                 " sets some of copy_async, free_async and synchronize; a "
                                 "backend sets all three or none");
  }
}

void check_policy(const std::string& path, const std::string& name, const kvc_policy_vtable& v) {
  require(v.create, path, name, "create");
  require(v.destroy, path, name, "destroy");
  require(v.needs, path, name, "needs");
  require(v.score || v.budgets, path, name, "score or budgets");
}

void check_store(const std::string& path, const std::string& name, const kvc_store_vtable& v) {
  require(v.create, path, name, "create");
  require(v.destroy, path, name, "destroy");
  require(v.put, path, name, "put");
  require(v.get, path, name, "get");
  require(v.exists, path, name, "exists");
  require(v.remove, path, name, "remove");
}

constexpr uint32_t kStoreAbi = (1u << 16) | 2u;  // the minor that added the store kind

}  // namespace

void check_plugin_call(int32_t code, const kvc_plugin_error& error, const std::string& who,
                       const char* what) {
  if (code == KVC_OK) return;
  const std::string message =
      printable(std::string_view(error.message, strnlen(error.message, sizeof(error.message))),
                sizeof(error.message));
  auto status = static_cast<kvc_status_code>(code);
  if (code < KVC_OK || code > KVC_ERR_IO) status = KVC_ERR_PLUGIN;
  throw Error(status, who + " " + what + ": " + message);
}

PluginRegistry::PluginRegistry(const kvc_host_api* host, Logger& logger)
    : host_(host), logger_(logger) {}

std::vector<LoadedPlugin> PluginRegistry::read_descriptors(
    const std::string& path, const kvc_plugin_descriptor* descriptors, size_t count) const {
  if (count > 0 && !descriptors) throw plugin_error(path, "entry point returned no descriptors");
  std::vector<LoadedPlugin> result;
  const auto* cursor = reinterpret_cast<const unsigned char*>(descriptors);
  for (size_t i = 0; i < count; ++i) {
    const auto* d = reinterpret_cast<const kvc_plugin_descriptor*>(cursor);
    uint32_t abi_major = d->abi_version >> 16;
    if (abi_major != KVC_PLUGIN_ABI_MAJOR) {
      throw plugin_error(path, "built for plugin ABI " + abi_text(d->abi_version) +
                                   ", this kvcache speaks ABI " +
                                   abi_text(KVC_PLUGIN_ABI_VERSION) + " (major must match)");
    }
    const auto descriptor = read_plugin_struct<kvc_plugin_descriptor>(
        path, "descriptor " + std::to_string(i), d, sizeof(kvc_plugin_descriptor), "1.0",
        d->abi_version);
    if (!descriptor.name || !*descriptor.name) throw plugin_error(path, "a descriptor has no name");
    if (!enum_in(descriptor.kind, KVC_PLUGIN_POLICY, KVC_PLUGIN_STORE)) {
      throw plugin_error(path, "plugin " + quote(descriptor.name) + " has unknown kind " +
                                   std::to_string(raw_enum(descriptor.kind)));
    }
    LoadedPlugin plugin{descriptor.kind, descriptor.name, descriptor.version,
                        descriptor.abi_version, path, {}, {}, {}};
    const std::string vtable = "the vtable of plugin " + quote(plugin.name);
    if (descriptor.kind == KVC_PLUGIN_BACKEND) {
      plugin.backend = read_plugin_struct<kvc_backend_vtable>(
          path, vtable, descriptor.vtable, offsetof(kvc_backend_vtable, read_tokens), "1.0",
          descriptor.abi_version);
      check_backend(path, plugin.name, plugin.backend);
    } else if (descriptor.kind == KVC_PLUGIN_STORE) {
      if (descriptor.abi_version < kStoreAbi) {
        throw plugin_error(path, "store plugin " + quote(plugin.name) +
                                     " is built for plugin ABI " +
                                     abi_text(descriptor.abi_version) +
                                     "; the store kind needs ABI " + abi_text(kStoreAbi) +
                                     " or later (this kvcache speaks ABI " +
                                     abi_text(KVC_PLUGIN_ABI_VERSION) + ")");
      }
      plugin.store = read_plugin_struct<kvc_store_vtable>(
          path, vtable, descriptor.vtable, sizeof(kvc_store_vtable), abi_text(kStoreAbi).c_str(),
          descriptor.abi_version);
      check_store(path, plugin.name, plugin.store);
    } else {
      plugin.policy = read_plugin_struct<kvc_policy_vtable>(
          path, vtable, descriptor.vtable, sizeof(kvc_policy_vtable), "1.0",
          descriptor.abi_version);
      check_policy(path, plugin.name, plugin.policy);
    }
    for (size_t j = 0; j < result.size(); ++j) {
      if (result[j].kind == plugin.kind && result[j].name == plugin.name) {
        throw Error(KVC_ERR_ALREADY_EXISTS, "plugin " + quote(path) + ": descriptors " +
                                                std::to_string(j) + " and " + std::to_string(i) +
                                                " both name a plugin " + quote(plugin.name));
      }
    }
    result.push_back(std::move(plugin));
    cursor += d->struct_size;
  }
  return result;
}

void PluginRegistry::load_library(const std::string& path) {
  boost::system::error_code ec;
  if (!boost::filesystem::exists(path, ec)) throw plugin_error(path, "no such file");
  require_file(path, "plugin");
  boost::dll::shared_library library;
  library.load(path, ec, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  if (ec) {
    // Boost.DLL 1.74 reports every dlopen failure as "bad file descriptor"; the dynamic
    // loader's own reason (an undefined symbol, a wrong architecture) is still in dlerror().
    const char* reason = ::dlerror();
    throw plugin_error(path, "cannot be loaded: " + std::string(reason ? reason : ec.message()));
  }
  if (!library.has(KVC_PLUGIN_ENTRY_SYMBOL)) {
    throw plugin_error(path, std::string("does not export the entry point '") +
                                 KVC_PLUGIN_ENTRY_SYMBOL + "'");
  }
  auto& entry = library.get<EntryFunction>(KVC_PLUGIN_ENTRY_SYMBOL);
  const kvc_plugin_descriptor* descriptors = nullptr;
  size_t count = 0;
  kvc_plugin_error error{};
  int32_t code = entry(host_, &descriptors, &count, &error);
  if (code != KVC_OK) {
    error.message[sizeof(error.message) - 1] = '\0';
    throw plugin_error(path,
                       "entry point failed: " + printable(error.message, sizeof(error.message)));
  }
  std::vector<LoadedPlugin> loaded = read_descriptors(path, descriptors, count);

  std::lock_guard<std::mutex> lock(mutex_);
  for (const LoadedPlugin& plugin : loaded) {
    for (const LoadedPlugin& existing : plugins_) {
      if (existing.kind == plugin.kind && existing.name == plugin.name) {
        throw Error(KVC_ERR_ALREADY_EXISTS, "plugin " + quote(path) + ": a plugin named " +
                                                quote(plugin.name) + " is already loaded from " +
                                                quote(existing.path));
      }
    }
  }
  for (LoadedPlugin& plugin : loaded) plugins_.push_back(std::move(plugin));
  libraries_.push_back(std::move(library));
}

bool PluginRegistry::already_loaded(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const LoadedPlugin& plugin : plugins_) {
    boost::system::error_code ec;
    if (boost::filesystem::equivalent(path, plugin.path, ec)) return true;
  }
  return false;
}

void PluginRegistry::load_folder(const std::string& folder) {
  namespace fs = boost::filesystem;
  boost::system::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    logger_.log(KVC_LOG_DEBUG, "plugin folder " + quote(folder) + " does not exist");
    return;
  }
  std::vector<std::string> files;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".so") files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    // A folder named twice (the default one also in KVC_PLUGIN_PATH, spelt another way).
    if (already_loaded(file)) {
      logger_.log(KVC_LOG_DEBUG, "plugin " + quote(file) + " is loaded already");
      continue;
    }
    try {
      load_library(file);
    } catch (const Error& e) {
      logger_.log(KVC_LOG_WARN, std::string("skipped: ") + e.what());
    }
  }
}

const LoadedPlugin* PluginRegistry::find(kvc_plugin_kind kind, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const LoadedPlugin& plugin : plugins_) {
    if (plugin.kind == kind && plugin.name == name) return &plugin;
  }
  return nullptr;
}

size_t PluginRegistry::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plugins_.size();
}

const LoadedPlugin& PluginRegistry::at(size_t index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index >= plugins_.size()) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "plugin index " + std::to_string(index) +
                                              " is out of range (" +
                                              std::to_string(plugins_.size()) + " loaded)");
  }
  return plugins_[index];
}

std::string PluginRegistry::names_of(kvc_plugin_kind kind) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string names;
  for (const LoadedPlugin& plugin : plugins_) {
    if (plugin.kind != kind) continue;
    if (!names.empty()) names += ", ";
    names += plugin.name;
  }
  return names.empty() ? "none" : names;
}

}  // namespace kvc
