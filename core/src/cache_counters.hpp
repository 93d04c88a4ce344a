// The counters of kvc_cache_stats that a cache's parts update as they store, evict and copy.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvc {

struct CacheCounters {
  std::atomic<uint64_t> tokens_stored{0};
  std::atomic<uint64_t> tokens_evicted{0};
  std::atomic<uint64_t> tokens_demoted{0};  // moved into a head's demoted tier by compression
  std::atomic<uint64_t> bytes_copied{0};  // by growth, unsharing and shrinking
};

}  // namespace kvc
