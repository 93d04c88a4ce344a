#include "backend.hpp"

#include <cstring>

#include "error.hpp"

namespace kvc {

Backend::Backend(const LoadedPlugin& plugin, const kvc_host_api* host)
    : name_(plugin.name), vtable_(plugin.backend) {
  kvc_plugin_error error{};
  check(vtable_.create(host, &instance_, &error), error, "create");
}

Backend::~Backend() { vtable_.destroy(instance_); }

void Backend::check(int32_t code, const kvc_plugin_error& error, const char* what) const {
  if (code == KVC_OK) return;
  std::string message(error.message, strnlen(error.message, sizeof(error.message)));
  auto status = static_cast<kvc_status_code>(code);
  if (code < KVC_OK || code > KVC_ERR_INTERNAL) status = KVC_ERR_PLUGIN;
  throw Error(status, "backend '" + name_ + "' " + what + ": " + message);
}

void Backend::copy(void* dst, const void* src, size_t bytes, kvc_copy_kind kind) {
  kvc_plugin_error error{};
  check(vtable_.copy(instance_, dst, src, bytes, kind, &error), error, "copy");
}

void Backend::append(const std::vector<kvc_append_job>& jobs, int32_t head_dim,
                     kvc_dtype storage) {
  if (jobs.empty()) return;
  kvc_plugin_error error{};
  check(vtable_.append(instance_, jobs.data(), jobs.size(), head_dim, storage, &error), error,
        "append");
}

void Backend::attend(const std::vector<kvc_attend_job>& jobs, const kvc_attend_config& config) {
  if (jobs.empty()) return;
  kvc_plugin_error error{};
  check(vtable_.attend(instance_, jobs.data(), jobs.size(), &config, &error), error, "attend");
}

}  // namespace kvc
