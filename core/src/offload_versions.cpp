#include "offload_versions.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

namespace kvc {

uint64_t OffloadVersions::next() {
  static std::atomic<uint64_t> last{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const uint64_t clock =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  uint64_t previous = last.load();
  uint64_t version = 0;
  do {
    version = std::max(clock, previous + 1);
  } while (!last.compare_exchange_weak(previous, version));
  return version;
}

void OffloadVersions::wrote(const std::string& key, uint64_t version) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t& kept = written_[key];
  kept = std::max(kept, version);
}

uint64_t OffloadVersions::last_written(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = written_.find(key);
  return found == written_.end() ? 0 : found->second;
}

}  // namespace kvc
