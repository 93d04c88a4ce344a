#include "store_loader.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace kvc::store_tests {
namespace {

void log_to_stderr(void*, kvc_log_level level, const char* message) {
  std::fprintf(stderr, "[store plugin, level %d] %s\n", static_cast<int>(level), message);
}

void serial_for(void*, size_t n, size_t, kvc_range_fn body, void* user_data) {
  if (n > 0) body(user_data, 0, n);
}

void* aligned_memory(void*, size_t bytes, size_t alignment) {
  void* memory = nullptr;
  return posix_memalign(&memory, alignment < sizeof(void*) ? sizeof(void*) : alignment, bytes) == 0
             ? memory
             : nullptr;
}

void release_memory(void*, void* memory) { std::free(memory); }

Outcome outcome(int32_t code, const kvc_plugin_error& error) {
  Outcome result;
  result.code = code;
  if (code != KVC_OK) result.message = error.message;
  return result;
}

void* reserve_into(void* user_data, size_t size) {
  auto* result = static_cast<GetResult*>(user_data);
  ++result->reserve_calls;
  result->reserved_size = size;
  result->value.resize(size);
  return size > 0 ? result->value.data() : static_cast<void*>(result);
}

void* reserve_nothing(void*, size_t) { return nullptr; }

}  // namespace

StorePlugin::StorePlugin(const std::string& path) {
  library_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) throw std::runtime_error("cannot load " + path + ": " + dlerror());
  auto entry = reinterpret_cast<kvc_plugin_entry_fn>(dlsym(library_, KVC_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) throw std::runtime_error(path + " has no " KVC_PLUGIN_ENTRY_SYMBOL);
  host_ = {sizeof(kvc_host_api), KVC_PLUGIN_ABI_VERSION, nullptr, &log_to_stderr,
           &serial_for, &aligned_memory, &release_memory};
  const kvc_plugin_descriptor* descriptors = nullptr;
  size_t count = 0;
  kvc_plugin_error error{};
  if (entry(&host_, &descriptors, &count, &error) != KVC_OK) {
    throw std::runtime_error(path + ": the entry point failed: " + error.message);
  }
  for (size_t i = 0; i < count; ++i) {
    const kvc_plugin_descriptor* d = KVC_PLUGIN_AT(const kvc_plugin_descriptor, descriptors, i);
    if (d->kind != KVC_PLUGIN_STORE) continue;
    if ((d->abi_version >> 16) != KVC_PLUGIN_ABI_MAJOR) {
      throw std::runtime_error(path + ": a store of another plugin ABI major");
    }
    const auto* vtable = static_cast<const kvc_store_vtable*>(d->vtable);
    if (vtable == nullptr || vtable->struct_size < sizeof(kvc_store_vtable)) {
      throw std::runtime_error(path + ": a store vtable smaller than plugin ABI 1.2's");
    }
    std::memcpy(&vtable_, vtable, sizeof vtable_);
    name_ = d->name;
    return;
  }
  throw std::runtime_error(path + " holds no store plugin");
}

StorePlugin::~StorePlugin() {
  if (library_ != nullptr) dlclose(library_);
}

Store::Store(const StorePlugin& plugin, const Params& params) : vtable_(plugin.vtable()) {
  std::vector<kvc_store_param> c_params;
  for (const auto& [key, value] : params) c_params.push_back({key.c_str(), value.c_str()});
  kvc_plugin_error error{};
  creation_ = outcome(
      vtable_.create(plugin.host(), c_params.data(), c_params.size(), &instance_, &error), error);
  if (creation_.code != KVC_OK) instance_ = nullptr;
}

Store::~Store() {
  if (instance_ != nullptr) vtable_.destroy(instance_);
}

Outcome Store::put(const std::string& key, const void* data, size_t size) {
  kvc_plugin_error error{};
  return outcome(vtable_.put(instance_, key.c_str(), data, size, &error), error);
}

GetResult Store::get(const std::string& key) {
  GetResult result;
  kvc_plugin_error error{};
  result.outcome = outcome(vtable_.get(instance_, key.c_str(), &reserve_into, &result, &error), error);
  return result;
}

Outcome Store::get_without_memory(const std::string& key) {
  kvc_plugin_error error{};
  return outcome(vtable_.get(instance_, key.c_str(), &reserve_nothing, nullptr, &error), error);
}

Outcome Store::exists(const std::string& key, bool& exists) {
  kvc_plugin_error error{};
  int32_t found = -1;
  const Outcome result = outcome(vtable_.exists(instance_, key.c_str(), &found, &error), error);
  exists = found == 1;
  return result;
}

Outcome Store::remove(const std::string& key) {
  kvc_plugin_error error{};
  return outcome(vtable_.remove(instance_, key.c_str(), &error), error);
}

}  // namespace kvc::store_tests
