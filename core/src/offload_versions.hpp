// The versions kvc_seq_offload writes into its values (SequenceImage::offload_version), and
// the last one a context's store was given under each key, so that a restore refuses a value
// older than that one (a store that lost the newer value, e.g. in a failover) rather than
// returning it as current (docs/stores.md, "Stale values").
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kvc {

class OffloadVersions {
 public:
  // A version above every one this process gave before: nanoseconds since the Unix epoch, or
  // the last one plus one, so that a later process on a host whose clock moves forward gives
  // higher ones too.
  static uint64_t next();

  // `version` was put under `key`; the greatest one put is kept.
  void wrote(const std::string& key, uint64_t version);
  // The greatest version put under `key`, 0 when none.
  uint64_t last_written(const std::string& key) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, uint64_t> written_;
};

}  // namespace kvc
