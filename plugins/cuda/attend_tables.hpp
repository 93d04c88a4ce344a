// The segment tables of one attend call: each job's table found resident (resident_tables.hpp)
// when the host's table id and version say it is unchanged, else packed into the call's upload
// and, when the job has a table id, stored for the calls after it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "device_types.hpp"
#include "instance.hpp"
#include "kvcache/kvcache_plugin.h"
#include "staging.hpp"

namespace kvc::cuda {

class AttendTables {
 public:
  using Table = DeviceTables::Table;

  // Finds the resident table of every job that has one at its version.
  AttendTables(Instance& instance, const kvc_attend_job* jobs, size_t n_jobs, cudaStream_t stream);
  // Gives the tables back, marked on the call's stream: what the call enqueued reads them.
  ~AttendTables();
  AttendTables(const AttendTables&) = delete;
  AttendTables& operator=(const AttendTables&) = delete;

  // Job j's resident table (NULL: its segments go in the upload).
  const Table* resident(size_t j) const { return found_[j]; }
  // The keys of job j, whose table is resident: the promise of kvc_attend_job::table_version
  // (every segment but the last holds as many tokens as the first) gives them from the first
  // and last counts.
  int32_t resident_keys(const kvc_attend_job& job, size_t j) const;
  // Points job j's DevAttendJob (at `at` in the upload) at its table: the resident one, or
  // one packed into the upload, which is then also stored when the job has a table id.
  void place(Upload& upload, size_t at, const kvc_attend_job& job, size_t j, bool vector_loads);
  // Fills the tables stored this call from the upload, now in `memory`.
  void fill(const DeviceScratch& memory);

 private:
  struct Stored {
    size_t hold;        // index into held_
    size_t table_at;    // the table's bytes in the upload
    size_t bytes;
  };
  Instance& instance_;
  cudaStream_t stream_;
  std::shared_ptr<ResidentMemory::Mark> mark_;
  std::vector<const Table*> found_;  // [job]
  std::vector<const Table*> held_;   // found and stored, as release() takes them
  std::vector<bool> filled_;
  std::vector<Stored> stored_;
};

}  // namespace kvc::cuda
