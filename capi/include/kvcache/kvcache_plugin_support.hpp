/**
 * @file kvcache_plugin_support.hpp
 * @brief C++ support for writing plugins (header-only; a plugin links nothing of kvcache):
 * the one error type a plugin throws and its translation into the ABI's status code and
 * message, and the reading of the host's versioned structs as this plugin's own.
 *
 * Errors: a plugin throws kvc::Error (kvcache_error.hpp; through kvc::plugin::fail,
 * printf-style), its message without the plugin's label; kvc::plugin::report_errors runs a body and turns whatever it throws into a ::kvc_status_code
 * plus a message in the ::kvc_plugin_error, so no exception crosses the C ABI. Messages start
 * with the plugin's label: each plugin library defines kvc::plugin::plugin_label() once
 * (KVC_BACKEND_PLUGIN in kvcache_backend_plugin.hpp does).
 *
 * Host structs (see "How the ABI grows" in kvcache_plugin.h): read_host_struct reads a call
 * or config struct of any size into a zeroed one of this plugin's; HostJobs copies job and
 * segment arrays strided by another struct_size into plain arrays (a host of the plugin's own
 * version passes plain arrays, which are used as they are).
 */
#ifndef KVCACHE_KVCACHE_PLUGIN_SUPPORT_HPP
#define KVCACHE_KVCACHE_PLUGIN_SUPPORT_HPP

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_plugin.h"

/** @cond internal */
namespace kvc::plugin {


// The prefix of the plugin's messages ("cpu backend"); defined once by each plugin.
const char* plugin_label();

// printf-style rather than std::to_string: libstdc++'s to_string drags a GNU-unique symbol
// into the dynamic symbol table, which would export more than the entry point.
[[noreturn]] __attribute__((format(printf, 2, 3))) inline void fail(kvc_status_code code,
                                                                    const char* format, ...) {
  char message[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  throw Error(code, message);
}

inline void write_error(kvc_plugin_error* error, const char* message) noexcept {
  if (error != nullptr) std::snprintf(error->message, sizeof error->message, "%s", message);
}

// With the plugin's label, allocating nothing (it may report that memory ran out).
inline void write_labelled_error(kvc_plugin_error* error, const char* message) noexcept {
  if (error != nullptr) {
    std::snprintf(error->message, sizeof error->message, "%s: %s", plugin_label(), message);
  }
}

// Runs body and turns any exception into a status code, so none crosses the C ABI.
template <class Body>
int32_t report_errors(kvc_plugin_error* error, Body&& body) noexcept {
  try {
    body();
    return KVC_OK;
  } catch (const Error& e) {
    write_labelled_error(error, e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    write_labelled_error(error, "out of host memory");
    return KVC_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(error, e.what());
    return KVC_ERR_INTERNAL;
  } catch (...) {
    write_labelled_error(error, "unknown exception");
    return KVC_ERR_INTERNAL;
  }
}



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

// A call struct with storage formats (append, attend, compact) from an older host lacks its
// (1.3) v_dtype: V is then stored as storage_dtype says, like K.
template <class Call>
void complete_formats(Call& call, const Call* given) {
  if constexpr (std::is_same_v<Call, kvc_append_call> || std::is_same_v<Call, kvc_attend_call> ||
                std::is_same_v<Call, kvc_compact_call>) {
    if (!KVC_PLUGIN_HAS_FIELD(given, Call, v_dtype)) call.v_dtype = call.storage_dtype;
  }
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
  static constexpr bool kHasSegments = !std::is_same_v<Job, kvc_append_job> &&
                                       !std::is_same_v<Job, kvc_append_slot> &&
                                       !std::is_same_v<Job, kvc_convert_job>;

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
/** @endcond */

#endif  // KVCACHE_KVCACHE_PLUGIN_SUPPORT_HPP
