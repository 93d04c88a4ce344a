#include "backend.hpp"

#include <vector>

#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_rotation.h"

namespace kvc {

namespace {

bool has_streams(const kvc_backend_vtable& vtable) { return vtable.copy_async != nullptr; }

// A rotation of K needs a backend that is told it (1.5's kvc_backend_config::k_rotation, through
// create_with_config) and that can tell stored rows from the engine's (1.5's
// kvc_append_tensors_call::k_rotated, through append_tensors).
void check_rotation(const LoadedPlugin& plugin, const CacheConfig& config) {
  if (config.k_rotation == KVC_ROTATION_NONE) return;
  const uint32_t minor = plugin.abi_version & 0xffffu;
  const std::string rotation = std::string("k_rotation ") + kvc_rotation_name(config.k_rotation);
  if (minor < 5) {
    throw Error(KVC_ERR_UNSUPPORTED, "backend '" + plugin.name +
                                         "' is built against plugin ABI 1." +
                                         std::to_string(minor) + ", which cannot rotate K (" +
                                         rotation + " needs 1.5)");
  }
  if (!plugin.backend.create_with_config || !plugin.backend.append_tensors) {
    throw Error(KVC_ERR_UNSUPPORTED, "backend '" + plugin.name + "' has no " +
                                         (plugin.backend.create_with_config ? "append_tensors"
                                                                            : "create_with_config") +
                                         ", which " + rotation + " needs");
  }
}

}  // namespace

Backend::Backend(const LoadedPlugin& plugin, const kvc_host_api* host, const CacheConfig& config)
    : name_(plugin.name),
      vtable_(plugin.backend),
      head_dim_(config.head_dim),
      kv_heads_(config.kv_heads),
      k_dtype_(config.k_dtype),
      v_dtype_(config.v_dtype) {
  // Before 1.3 the call structs had one storage format, which a backend applies to V too.
  if (k_dtype_ != v_dtype_ && (plugin.abi_version & 0xffffu) < 3) {
    throw Error(KVC_ERR_UNSUPPORTED,
                "backend '" + name_ + "' is built against plugin ABI 1." +
                    std::to_string(plugin.abi_version & 0xffffu) +
                    ", which has one storage format for K and V; K is " +
                    kvc_dtype_name(k_dtype_) + " and V " + kvc_dtype_name(v_dtype_));
  }
  check_rotation(plugin, config);
  kvc_plugin_error error{};
  if (!vtable_.create_with_config) {
    check(vtable_.create(host, &instance_, &error), error, "create");
    return;
  }
  std::vector<kvc_backend_param> params;
  for (const auto& [key, value] : config.backend_params) {
    params.push_back({key.c_str(), value.c_str()});
  }
  kvc_backend_config c{};
  c.struct_size = sizeof(c);
  c.n_layers = config.layers;
  c.n_kv_heads = config.kv_heads;
  c.n_q_heads = config.q_heads;
  c.head_dim = config.head_dim;
  c.k_dtype = config.k_dtype;
  c.v_dtype = config.v_dtype;
  c.layout = config.layout;
  c.block_tokens = config.block_tokens;
  c.memory_limit = config.memory_limit;
  c.device = config.backend_device;
  c.params = params.data();
  c.n_params = params.size();
  c.k_rotation = config.k_rotation;
  check(vtable_.create_with_config(host, &c, &instance_, &error), error, "create");
}

Backend::~Backend() { vtable_.destroy(instance_); }

void Backend::check(int32_t code, const kvc_plugin_error& error, const char* what) const {
  check_plugin_call(code, error, "backend '" + name_ + "'", what);
}

void Backend::free(void* ptr, void* stream) {
  if (has_streams(vtable_)) {
    vtable_.free_async(instance_, ptr, on(stream));
  } else {
    vtable_.free(instance_, ptr);
  }
}

void Backend::copy(void* dst, const void* src, size_t bytes, kvc_copy_kind kind, void* stream) {
  kvc_plugin_error error{};
  if (!has_streams(vtable_)) {
    check(vtable_.copy(instance_, dst, src, bytes, kind, &error), error, "copy");
    return;
  }
  stream = on(stream);
  check(vtable_.copy_async(instance_, dst, src, bytes, kind, stream, &error), error, "copy_async");
  if (kind != KVC_COPY_DEVICE_TO_DEVICE) {
    check(vtable_.synchronize(instance_, stream, &error), error, "synchronize");
  }
}

void Backend::append(const std::vector<kvc_append_slot>& slots, kvc_append_tensors_call call) {
  if (slots.empty()) return;
  call.struct_size = sizeof(call);
  call.head_dim = head_dim_;
  call.n_kv_heads = kv_heads_;
  call.k_dtype = k_dtype_;
  call.v_dtype = v_dtype_;
  call.slots = slots.data();
  call.n_slots = slots.size();
  call.stream = on(call.stream);
  if (!vtable_.append_tensors) {
    append_by_jobs(call);
    return;
  }
  kvc_plugin_error error{};
  check(vtable_.append_tensors(instance_, &call, &error), error, "append_tensors");
}

// The one translation of a tensor append into the job list of ABI 1.0-1.3: a job per slot,
// its sources the slot's first row of each tensor.
void Backend::append_by_jobs(const kvc_append_tensors_call& call) {
  auto row = [](const void* base, kvc_dtype dtype, size_t elements) {
    return static_cast<const unsigned char*>(base) + kvc_format_row_bytes(dtype, elements);
  };
  std::vector<kvc_append_job> jobs;
  jobs.reserve(call.n_slots);
  for (size_t i = 0; i < call.n_slots; ++i) {
    const kvc_append_slot& slot = call.slots[i];
    const size_t token = static_cast<size_t>(slot.first_token);
    const size_t head = static_cast<size_t>(slot.kv_head);
    kvc_append_job job{};
    job.struct_size = sizeof(job);
    job.n_tokens = slot.n_tokens;
    job.src_k = row(call.src_k, call.src_k_dtype,
                    token * call.src_k_token_stride + head * call.src_k_head_stride);
    job.src_v = row(call.src_v, call.src_v_dtype,
                    token * call.src_v_token_stride + head * call.src_v_head_stride);
    job.src_k_stride = call.src_k_token_stride;
    job.src_v_stride = call.src_v_token_stride;
    job.src_dtype = call.src_k_dtype;
    job.src_v_dtype = call.src_v_dtype;
    job.src_device = call.src_device;
    job.src_pos = call.src_pos + token;
    job.dst_k = slot.dst_k;
    job.dst_v = slot.dst_v;
    job.dst_pos = slot.dst_pos;
    job.dst_stats = slot.dst_stats;
    jobs.push_back(job);
  }
  kvc_append_call jobs_call{sizeof(jobs_call), head_dim_,   k_dtype_, call.stream,
                            jobs.data(),       jobs.size(), v_dtype_};
  kvc_plugin_error error{};
  check(vtable_.append(instance_, &jobs_call, &error), error, "append");
}

void Backend::attend(const std::vector<kvc_attend_job>& jobs, kvc_attend_call call) {
  if (jobs.empty()) return;
  call.struct_size = sizeof(call);
  call.head_dim = head_dim_;
  call.storage_dtype = k_dtype_;
  call.v_dtype = v_dtype_;
  call.jobs = jobs.data();
  call.n_jobs = jobs.size();
  call.stream = on(call.stream);
  kvc_plugin_error error{};
  check(vtable_.attend(instance_, &call, &error), error, "attend");
}

void Backend::compact(const std::vector<kvc_compact_job>& jobs, void* stream) {
  if (jobs.empty()) return;
  kvc_compact_call call{sizeof(call), head_dim_, k_dtype_, on(stream),
                        jobs.data(), jobs.size(),   v_dtype_};
  kvc_plugin_error error{};
  check(vtable_.compact(instance_, &call, &error), error, "compact");
}

void Backend::read_keys(const std::vector<kvc_read_keys_job>& jobs, void* stream) {
  if (jobs.empty()) return;
  kvc_read_keys_call call{sizeof(call), head_dim_, k_dtype_, on(stream),
                          jobs.data(), jobs.size()};
  kvc_plugin_error error{};
  check(vtable_.read_keys(instance_, &call, &error), error, "read_keys");
}

void Backend::convert(const std::vector<kvc_convert_job>& jobs, void* stream) {
  if (jobs.empty()) return;
  kvc_convert_call call{sizeof(call), head_dim_, on(stream), jobs.data(), jobs.size()};
  kvc_plugin_error error{};
  check(vtable_.convert(instance_, &call, &error), error, "convert");
}

void Backend::read_tokens(const std::vector<kvc_read_tokens_job>& jobs, void* stream) {
  if (jobs.empty()) return;
  if (!vtable_.read_tokens) {
    for (const kvc_read_tokens_job& job : jobs) read_tokens_by_copy(job, stream);
    return;
  }
  kvc_read_tokens_call call{sizeof(call), on(stream), jobs.data(), jobs.size()};
  kvc_plugin_error error{};
  check(vtable_.read_tokens(instance_, &call, &error), error, "read_tokens");
}

void Backend::read_tokens_by_copy(const kvc_read_tokens_job& job, void* stream) {
  size_t tokens = 0;
  for (int32_t s = 0; s < job.n_segments; ++s) {
    const kvc_segment& segment = job.segments[s];
    if (job.out_pos && segment.count > 0) {
      copy(job.out_pos + tokens, segment.pos, sizeof(int32_t) * static_cast<size_t>(segment.count),
           KVC_COPY_DEVICE_TO_HOST, stream);
    }
    tokens += static_cast<size_t>(segment.count);
  }
  const std::pair<float*, const float*> stats[] = {{job.out_attn_sum, job.stats.attn_sum},
                                                   {job.out_attn_last, job.stats.attn_last},
                                                   {job.out_attn_window, job.stats.attn_window}};
  for (const auto& [out, source] : stats) {
    if (out && source && tokens > 0) {
      copy(out, source, sizeof(float) * tokens, KVC_COPY_DEVICE_TO_HOST, stream);
    }
  }
}

}  // namespace kvc
