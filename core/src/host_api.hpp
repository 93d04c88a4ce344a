// The kvc_host_api table handed to plugins: logging, host memory and parallel_for on the
// context's TBB arena.
#pragma once

#include <tbb/task_arena.h>

#include "kvcache/kvcache_plugin.h"
#include "logger.hpp"

namespace kvc {

class HostServices {
 public:
  HostServices(Logger& logger, tbb::task_arena& arena);
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  const kvc_host_api* api() const { return &api_; }
  // The same parallel_for plugins get, for the core's own loops.
  void parallel_for(size_t n, size_t grain, kvc_range_fn body, void* user_data) const;
  template <typename Body>
  void parallel_for(size_t n, size_t grain, Body&& body) const {
    parallel_for(n, grain, [](void* self, size_t begin, size_t end) {
      (*static_cast<Body*>(self))(begin, end);
    }, &body);
  }
  Logger& logger() const { return logger_; }

 private:
  Logger& logger_;
  tbb::task_arena& arena_;
  kvc_host_api api_{};
};

}  // namespace kvc
