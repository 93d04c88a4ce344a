// parallel_for over the host's thread arena with a C++ callable as the body.
#pragma once

#include <cstddef>
#include <exception>
#include <mutex>

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

// Runs body(begin, end) over [0, n) in chunks of at least grain. The body runs behind a C
// callback on the host's threads, so an exception is caught there and rethrown here.
template <class Body>
void parallel_for(const kvc_host_api& host, size_t n, size_t grain, const Body& body) {
  if (n == 0) return;
  struct Call {
    const Body* body;
    std::mutex mutex;
    std::exception_ptr first_error;
  } call{&body, {}, {}};
  const kvc_range_fn run_chunk = [](void* user_data, size_t begin, size_t end) {
    auto* c = static_cast<Call*>(user_data);
    try {
      (*c->body)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(c->mutex);
      if (!c->first_error) c->first_error = std::current_exception();
    }
  };
  host.parallel_for(host.host, n, grain, run_chunk, &call);
  if (call.first_error) std::rethrow_exception(call.first_error);
}

}  // namespace kvc::cpu
