#include "store.hpp"

#include "kvcache/kvcache_error.hpp"
#include "quote.hpp"

namespace kvc {
namespace {

// The memory a get reserves through kvc_store_reserve_fn; called by C code, so nothing thrown.
struct Reservation {
  StoredValue value;
  bool reserved = false;
};

void* reserve_value(void* user_data, size_t size) noexcept {
  auto* reservation = static_cast<Reservation*>(user_data);
  if (reservation->reserved) return nullptr;  // at most once per get
  reservation->value = StoredValue::allocate(size);
  if (reservation->value.data() == nullptr) return nullptr;
  reservation->reserved = true;
  return reservation->value.data();
}

std::string key_text(const char* action, const std::string& key) {
  return std::string(action) + " " + quote(key);
}

}  // namespace

Store::Store(const StoreConfig& config, const LoadedPlugin& plugin, const kvc_host_api* host)
    : name_(config.name),
      who_("store " + quote(config.name) + " (plugin " + quote(plugin.name) + "):"),
      vtable_(plugin.store) {
  std::vector<kvc_store_param> params;
  params.reserve(config.params.size());
  for (const auto& [key, value] : config.params) params.push_back({key.c_str(), value.c_str()});
  kvc_plugin_error error{};
  void* instance = nullptr;
  check_plugin_call(vtable_.create(host, params.data(), params.size(), &instance, &error), error,
                    who_, "create");
  instance_ = instance;
}

Store::~Store() { vtable_.destroy(instance_); }

void Store::put(const std::string& key, const void* data, size_t size) const {
  kvc_plugin_error error{};
  check_plugin_call(vtable_.put(instance_, key.c_str(), data, size, &error), error, who_,
                    key_text("put", key).c_str());
}

StoredValue Store::get(const std::string& key) const {
  Reservation reservation;
  kvc_plugin_error error{};
  check_plugin_call(vtable_.get(instance_, key.c_str(), reserve_value, &reservation, &error),
                    error, who_, key_text("get", key).c_str());
  return std::move(reservation.value);
}

bool Store::exists(const std::string& key) const {
  kvc_plugin_error error{};
  int32_t exists = 0;
  check_plugin_call(vtable_.exists(instance_, key.c_str(), &exists, &error), error, who_,
                    key_text("exists", key).c_str());
  return exists != 0;
}

void Store::remove(const std::string& key) const {
  kvc_plugin_error error{};
  check_plugin_call(vtable_.remove(instance_, key.c_str(), &error), error, who_,
                    key_text("remove", key).c_str());
}

}  // namespace kvc
