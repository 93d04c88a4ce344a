#include "host_api.hpp"

#include "enums.hpp"

#include <cstdlib>
#include <string>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace kvc {
namespace {

HostServices& services(void* host) { return *static_cast<HostServices*>(host); }

void host_log(void* host, kvc_log_level level, const char* message) {
  try {
    const char* text = message ? message : "";
    if (enum_in(level, KVC_LOG_DEBUG, KVC_LOG_OFF)) {
      services(host).logger().log(level, text);
    } else {
      services(host).logger().log(KVC_LOG_WARN, "a plugin logged at unknown level " +
                                                    std::to_string(raw_enum(level)) + ": " + text);
    }
  } catch (...) {
    // Logging must never throw into a plugin.
  }
}

void host_parallel_for(void* host, size_t n, size_t grain, kvc_range_fn body, void* user_data) {
  services(host).parallel_for(n, grain, body, user_data);
}

void* host_alloc(void*, size_t bytes, size_t alignment) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return nullptr;
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
}

void host_free(void*, void* ptr) { std::free(ptr); }

}  // namespace

HostServices::HostServices(Logger& logger, tbb::task_arena& arena)
    : logger_(logger), arena_(arena) {
  api_.struct_size = sizeof(kvc_host_api);
  api_.abi_version = KVC_PLUGIN_ABI_VERSION;
  api_.host = this;
  api_.log = host_log;
  api_.parallel_for = host_parallel_for;
  api_.alloc = host_alloc;
  api_.free = host_free;
}

void HostServices::parallel_for(size_t n, size_t grain, kvc_range_fn body,
                                void* user_data) const {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  if (n <= grain) {
    body(user_data, 0, n);
    return;
  }
  arena_.execute([&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, n, grain),
                      [&](const tbb::blocked_range<size_t>& r) { body(user_data, r.begin(), r.end()); });
  });
}

}  // namespace kvc
