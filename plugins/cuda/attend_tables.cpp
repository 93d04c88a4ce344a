#include "attend_tables.hpp"

#include <climits>
#include <mutex>

#include "token_index.hpp"
#include "validation.hpp"

namespace kvc::cuda {

namespace {

// Whether the job's counts are as the promise of kvc_attend_job::table_version says (every
// segment but the last as full as the first, the last at most as full), which resident_keys
// relies on: a table is stored only then.
bool keeps_promise(const kvc_attend_job& job) {
  const int32_t first = job.segments[0].count;
  for (int32_t s = 1; s + 1 < job.n_segments; ++s)
    if (job.segments[s].count != first) return false;
  return job.segments[job.n_segments - 1].count <= first;
}

}  // namespace

AttendTables::AttendTables(Instance& instance, const kvc_attend_job* jobs, size_t n_jobs,
                           cudaStream_t stream)
    : instance_(instance), stream_(stream), mark_(DeviceTables::new_mark()), found_(n_jobs) {
  held_.reserve(n_jobs);
  filled_.reserve(n_jobs);
  stored_.reserve(n_jobs);
  const std::lock_guard<std::mutex> lock(instance_.tables_mutex);
  for (size_t j = 0; j < n_jobs; ++j) {
    if (jobs[j].table_id == 0 || jobs[j].n_segments <= 0) continue;
    found_[j] = instance_.tables.find(jobs[j].table_id, jobs[j].table_version,
                                      jobs[j].n_segments, stream_);
    if (!found_[j]) continue;
    held_.push_back(found_[j]);
    filled_.push_back(true);
  }
}

AttendTables::~AttendTables() {
  const std::lock_guard<std::mutex> lock(instance_.tables_mutex);
  instance_.tables.release(mark_, held_, filled_, stream_);
}

int32_t AttendTables::resident_keys(const kvc_attend_job& job, size_t j) const {
  const kvc_segment& first = job.segments[0];
  const kvc_segment& last = job.segments[job.n_segments - 1];
  if (last.count < 0 || (job.n_segments > 1 && last.count > first.count))
    fail(KVC_ERR_INVALID_ARGUMENT,
         "attend job %zu: its last segment holds %d tokens, its first %d: not a table version "
         "the backend keeps",
         j, last.count, first.count);
  const int64_t keys = int64_t(first.count) * (job.n_segments - 1) + last.count;
  if (keys > INT32_MAX)
    fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: %lld tokens is more than 2^31 - 1", j,
         static_cast<long long>(keys));
  return int32_t(keys);
}

void AttendTables::place(Upload& upload, size_t at, const kvc_attend_job& job, size_t j,
                         bool vector_loads) {
  const size_t n = size_t(job.n_segments > 0 ? job.n_segments : 0);
  if (const Table* table = found_[j]) {
    DevAttendJob* d = upload.at<DevAttendJob>(at);
    d->segments = static_cast<const DevSegment*>(table->memory);
    d->segment_begins =
        reinterpret_cast<const int64_t*>(static_cast<const char*>(table->memory) + table_begins_offset(n));
    return;
  }
  size_t segments_at = 0, begins_at = 0;
  add_segments(upload, job.segments, job.n_segments, segments_at, begins_at);
  upload.link(at + offsetof(DevAttendJob, segments), segments_at);
  upload.link(at + offsetof(DevAttendJob, segment_begins), begins_at);
  if (job.table_id == 0 || n == 0 || !keeps_promise(job)) return;
  const std::lock_guard<std::mutex> lock(instance_.tables_mutex);
  const Table* table = instance_.tables.store(job.table_id, job.table_version, job.n_segments,
                                              table_bytes(n), vector_loads, stream_);
  if (!table) return;
  held_.push_back(table);
  filled_.push_back(false);
  stored_.push_back({held_.size() - 1, segments_at, table_bytes(n)});
}

void AttendTables::fill(const DeviceScratch& memory) {
  for (const Stored& s : stored_) {
    check_cuda(cudaMemcpyAsync(held_[s.hold]->memory, memory.data() + s.table_at, s.bytes,
                               cudaMemcpyDeviceToDevice, stream_),
               "storing a segment table");
    filled_[s.hold] = true;
  }
}

}  // namespace kvc::cuda
