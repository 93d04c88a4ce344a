#include "backend.hpp"

#include "error.hpp"

namespace kvc {

Backend::Backend(const LoadedPlugin& plugin, const kvc_host_api* host)
    : name_(plugin.name), vtable_(plugin.backend) {
  kvc_plugin_error error{};
  check(vtable_.create(host, &instance_, &error), error, "create");
}

Backend::~Backend() { vtable_.destroy(instance_); }

void Backend::check(int32_t code, const kvc_plugin_error& error, const char* what) const {
  check_plugin_call(code, error, "backend '" + name_ + "'", what);
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

void Backend::compact(const std::vector<kvc_compact_job>& jobs, int32_t head_dim,
                      kvc_dtype storage) {
  if (jobs.empty()) return;
  kvc_plugin_error error{};
  check(vtable_.compact(instance_, jobs.data(), jobs.size(), head_dim, storage, &error), error,
        "compact");
}

void Backend::read_keys(const std::vector<kvc_segment>& segments, float* out, int32_t head_dim,
                        kvc_dtype storage) {
  if (segments.empty()) return;
  kvc_read_keys_job job{segments.data(), static_cast<int32_t>(segments.size()), out};
  kvc_plugin_error error{};
  check(vtable_.read_keys(instance_, &job, 1, head_dim, storage, &error), error, "read_keys");
}

}  // namespace kvc
