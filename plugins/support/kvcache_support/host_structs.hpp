// What the host hands over, read as this plugin's structs (see "How the ABI grows" in
// kvcache_plugin.h): a call struct of any size is read into a zeroed one of ours, and job and
// segment arrays strided by another struct_size are copied into plain arrays. A host of this
// plugin's own version passes plain arrays, which are used as they are. Shared by the in-tree
// backends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kvcache/kvcache_plugin.h"
#include "kvcache_support/plugin_error.hpp"

namespace kvc::plugin {

// Reads a host struct of at least `min_size` bytes (ABI 1.0's) into a zeroed one of ours.
template <class Struct>
Struct read_host_struct(const Struct* given, size_t min_size, const char* what) {
  if (given == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  if (given->struct_size < min_size)
    fail(KVC_ERR_INVALID_ARGUMENT, "%s of %u bytes is smaller than plugin ABI 1.0's %zu", what,
         unsigned(given->struct_size), min_size);
  Struct copy{};
  std::memcpy(&copy, given, std::min<size_t>(given->struct_size, sizeof copy));
  copy.struct_size = sizeof copy;
  return copy;
}

// A call struct with storage formats (append, attend, compact) read like read_host_struct(),
// its (1.3) v_dtype taken from storage_dtype when an older host's struct lacks it.
template <class Call>
Call read_storage_call(const Call* given, size_t min_size, const char* what) {
  Call call = read_host_struct(given, min_size, what);
  if (!KVC_PLUGIN_HAS_FIELD(given, Call, v_dtype)) call.v_dtype = call.storage_dtype;
  return call;
}

// Jobs whose `segments` (if they have any) are plain kvc_segment arrays. An append job from an
// older host gets its (1.3) src_v_dtype from src_dtype.
template <class Job>
class HostJobs {
 public:
  HostJobs(const Job* jobs, size_t n_jobs, size_t min_size, const char* call) : jobs_(jobs) {
    if (n_jobs == 0) return;
    if (jobs == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "%s jobs are NULL", call);
    if (jobs->struct_size < min_size)
      fail(KVC_ERR_INVALID_ARGUMENT, "%s jobs of %u bytes are smaller than plugin ABI 1.0's %zu",
           call, unsigned(jobs->struct_size), min_size);
    if (jobs->struct_size == sizeof(Job) && plain_segments(jobs, n_jobs)) return;
    copies_.resize(n_jobs);
    segments_.resize(n_jobs);
    for (size_t j = 0; j < n_jobs; ++j) {
      const Job* job = KVC_PLUGIN_AT(const Job, jobs, j);
      std::memcpy(&copies_[j], job, std::min<size_t>(jobs->struct_size, sizeof(Job)));
      copies_[j].struct_size = sizeof(Job);
      if constexpr (kHasSegments) copy_segments(copies_[j], segments_[j], call, j);
      if constexpr (std::is_same_v<Job, kvc_append_job>) {
        if (!KVC_PLUGIN_HAS_FIELD(job, kvc_append_job, src_v_dtype))
          copies_[j].src_v_dtype = copies_[j].src_dtype;
      }
    }
    jobs_ = copies_.data();
  }
  const Job* data() const { return jobs_; }

 private:
  static constexpr bool kHasSegments = !std::is_same_v<Job, kvc_append_job>;

  static bool plain_segments(const Job* jobs, size_t n_jobs) {
    if constexpr (kHasSegments) {
      for (size_t j = 0; j < n_jobs; ++j)
        if (jobs[j].n_segments > 0 && jobs[j].segments != nullptr &&
            jobs[j].segments->struct_size != sizeof(kvc_segment))
          return false;
    }
    return true;
  }

  static void copy_segments(Job& job, std::vector<kvc_segment>& out, const char* call, size_t j) {
    if (job.n_segments <= 0 || job.segments == nullptr) return;
    const size_t size = job.segments->struct_size;
    if (size < offsetof(kvc_segment, pos) + sizeof(job.segments->pos))
      fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: segments are smaller than plugin ABI 1.0's", call, j);
    out.resize(size_t(job.n_segments));
    for (size_t s = 0; s < out.size(); ++s) {
      std::memcpy(&out[s], KVC_PLUGIN_AT(const kvc_segment, job.segments, s),
                  std::min(size, sizeof(kvc_segment)));
      out[s].struct_size = sizeof(kvc_segment);
    }
    job.segments = out.data();
  }

  const Job* jobs_;
  std::vector<Job> copies_;
  std::vector<std::vector<kvc_segment>> segments_;
};

}  // namespace kvc::plugin
