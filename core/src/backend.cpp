#include "backend.hpp"

#include "error.hpp"

namespace kvc {

Backend::Backend(const LoadedPlugin& plugin, const kvc_host_api* host, CallShape shape)
    : name_(plugin.name), vtable_(plugin.backend), shape_(shape) {
  kvc_plugin_error error{};
  check(vtable_.create(host, &instance_, &error), error, "create");
}

Backend::~Backend() { vtable_.destroy(instance_); }

void Backend::check(int32_t code, const kvc_plugin_error& error, const char* what) const {
  check_plugin_call(code, error, "backend '" + name_ + "'", what);
}

void Backend::copy(void* dst, const void* src, size_t bytes, kvc_copy_kind kind) {
  kvc_plugin_error error{};
  check(vtable_.copy(instance_, dst, src, bytes, kind, &error), error, "copy");
}

void Backend::append(const std::vector<kvc_append_job>& jobs, void* stream) {
  if (jobs.empty()) return;
  kvc_append_call call{sizeof(call), shape_.head_dim, shape_.k_dtype, stream, jobs.data(),
                       jobs.size(),   shape_.v_dtype};
  kvc_plugin_error error{};
  check(vtable_.append(instance_, &call, &error), error, "append");
}

void Backend::attend(const std::vector<kvc_attend_job>& jobs, kvc_attend_call call) {
  if (jobs.empty()) return;
  call.struct_size = sizeof(call);
  call.head_dim = shape_.head_dim;
  call.storage_dtype = shape_.k_dtype;
  call.v_dtype = shape_.v_dtype;
  call.jobs = jobs.data();
  call.n_jobs = jobs.size();
  kvc_plugin_error error{};
  check(vtable_.attend(instance_, &call, &error), error, "attend");
}

void Backend::compact(const std::vector<kvc_compact_job>& jobs, void* stream) {
  if (jobs.empty()) return;
  kvc_compact_call call{sizeof(call), shape_.head_dim, shape_.k_dtype, stream,
                        jobs.data(), jobs.size(),   shape_.v_dtype};
  kvc_plugin_error error{};
  check(vtable_.compact(instance_, &call, &error), error, "compact");
}

void Backend::read_keys(const std::vector<kvc_read_keys_job>& jobs, void* stream) {
  if (jobs.empty()) return;
  kvc_read_keys_call call{sizeof(call), shape_.head_dim, shape_.k_dtype, stream,
                          jobs.data(), jobs.size()};
  kvc_plugin_error error{};
  check(vtable_.read_keys(instance_, &call, &error), error, "read_keys");
}

void Backend::read_tokens(const std::vector<kvc_read_tokens_job>& jobs, void* stream) {
  if (jobs.empty()) return;
  if (!vtable_.read_tokens) {
    for (const kvc_read_tokens_job& job : jobs) read_tokens_by_copy(job);
    return;
  }
  kvc_read_tokens_call call{sizeof(call), stream, jobs.data(), jobs.size()};
  kvc_plugin_error error{};
  check(vtable_.read_tokens(instance_, &call, &error), error, "read_tokens");
}

void Backend::read_tokens_by_copy(const kvc_read_tokens_job& job) {
  size_t tokens = 0;
  for (int32_t s = 0; s < job.n_segments; ++s) {
    const kvc_segment& segment = job.segments[s];
    if (job.out_pos && segment.count > 0) {
      copy(job.out_pos + tokens, segment.pos, sizeof(int32_t) * static_cast<size_t>(segment.count),
           KVC_COPY_DEVICE_TO_HOST);
    }
    tokens += static_cast<size_t>(segment.count);
  }
  const std::pair<float*, const float*> stats[] = {{job.out_attn_sum, job.stats.attn_sum},
                                                   {job.out_attn_last, job.stats.attn_last},
                                                   {job.out_attn_window, job.stats.attn_window}};
  for (const auto& [out, source] : stats) {
    if (out && source && tokens > 0) copy(out, source, sizeof(float) * tokens, KVC_COPY_DEVICE_TO_HOST);
  }
}

}  // namespace kvc
