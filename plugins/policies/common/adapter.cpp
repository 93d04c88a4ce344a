#include "adapter.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>

namespace kvc::policies {

void write_error(kvc_plugin_error* error, const char* message) noexcept {
  if (error == nullptr) return;
  if (message == nullptr) message = "";
  size_t length = std::strlen(message);
  if (length >= sizeof error->message) {
    length = sizeof error->message - 1;
    // Do not cut a multi-byte character: back up over continuation bytes.
    while (length > 0 && (static_cast<unsigned char>(message[length]) & 0xC0u) == 0x80u) --length;
  }
  std::memcpy(error->message, message, length);
  error->message[length] = '\0';
}

void copy_needs(const kvc_policy_needs& from, kvc_policy_needs* to) noexcept {
  const size_t header = sizeof to->struct_size;
  const size_t size = std::min<size_t>(to->struct_size, sizeof from);
  if (size <= header) return;
  std::memcpy(reinterpret_cast<char*>(to) + header, reinterpret_cast<const char*>(&from) + header,
              size - header);
}

HostJobs::HostJobs(const kvc_score_job* jobs, size_t n_jobs) : jobs_(jobs) {
  if (n_jobs == 0 || jobs == nullptr || jobs->struct_size == sizeof(kvc_score_job)) return;
  const size_t size = jobs->struct_size;
  if (size < offsetof(kvc_score_job, scores) + sizeof jobs->scores) {
    argument_error("score jobs are smaller than plugin ABI 1.0's");
  }
  copies_.resize(n_jobs);
  for (size_t i = 0; i < n_jobs; ++i) {
    kvc_score_job& copy = copies_[i];
    std::memcpy(&copy, KVC_PLUGIN_AT(const kvc_score_job, jobs, i), std::min(size, sizeof copy));
    copy.struct_size = sizeof copy;
    if (!KVC_PLUGIN_HAS_FIELD(jobs, kvc_score_job, recent_begin)) copy.sink_end = copy.recent_begin = -1;
  }
  jobs_ = copies_.data();
}

int32_t plugin_entry(const kvc_plugin_descriptor* descriptor, const kvc_host_api* host,
                     const kvc_plugin_descriptor** out_descriptors, size_t* out_count,
                     kvc_plugin_error* error) noexcept {
  if (out_descriptors == nullptr || out_count == nullptr) {
    write_error(error, "kvc_plugin_entry needs its out-parameters");
    return KVC_ERR_INVALID_ARGUMENT;
  }
  if (host != nullptr && (host->abi_version >> 16) != KVC_PLUGIN_ABI_MAJOR) {
    char message[128];
    std::snprintf(message, sizeof message,
                  "policy '%s' was built for plugin ABI %d.%d, the host has %u.%u",
                  descriptor->name, KVC_PLUGIN_ABI_MAJOR, KVC_PLUGIN_ABI_MINOR,
                  host->abi_version >> 16, host->abi_version & 0xFFFFu);
    write_error(error, message);
    return KVC_ERR_PLUGIN;
  }
  *out_descriptors = descriptor;
  *out_count = 1;
  return KVC_OK;
}

}  // namespace kvc::policies
