/**
 * @file kvcache_backend_plugin.hpp
 * @brief The skeleton of a backend plugin in C++ (header-only; a plugin links nothing of
 * kvcache): the entry point, the descriptor, the vtable, the checks of what the host passes
 * and the translation of exceptions into status codes, in one place, so that a backend
 * provides only its memory and its kernels. The in-tree cpu and cuda backends use it.
 *
 * A backend class B provides:
 * @code
 *   static constexpr const char* kName = "mine";          // the descriptor's name (YAML)
 *   static constexpr const char* kLabel = "mine backend"; // the prefix of its messages
 *   // A new instance for one cache; `config` is NULL when the host has no ABI 1.3 config
 *   // (then the backend picks its defaults). Throws Error to refuse (see
 *   // kvc_backend_vtable::create_with_config for the codes).
 *   static B* create(const kvc_host_api& host, const kvc_backend_config* config);
 *   // Optional (ABI 1.5): the backend applies config->k_rotation (kvcache_rotation.h) to K on
 *   // append (not to rows of a call with k_rotated set) and to queries at attention; without
 *   // it the skeleton refuses any rotation but KVC_ROTATION_NONE.
 *   static constexpr bool kRotatesK = true;
 *   void* alloc(size_t bytes) noexcept;                    // NULL when exhausted
 *   void free(void* ptr) noexcept;                         // ABI 1.0 free
 *   void free_async(void* ptr, void* stream) noexcept;     // ABI 1.3 free_async
 *   // `bytes` > 0, both pointers set, `kind` valid. Stream NULL: ordered after all earlier
 *   // work and done on return (ABI 1.0 copy); else queued on the stream.
 *   void copy(void* dst, const void* src, size_t bytes, kvc_copy_kind kind, void* stream);
 *   void synchronize(void* stream);
 *   // The data calls, with the call read into this header's struct and its jobs (and their
 *   // segments) as plain arrays of this header's structs.
 *   void append(const kvc_append_job* jobs, const kvc_append_call& call);
 *   void attend(const kvc_attend_job* jobs, const kvc_attend_call& call);
 *   void compact(const kvc_compact_job* jobs, const kvc_compact_call& call);
 *   void read_keys(const kvc_read_keys_job* jobs, const kvc_read_keys_call& call);
 *   void read_tokens(const kvc_read_tokens_job* jobs, const kvc_read_tokens_call& call);
 *   // Optional (ABI 1.4): the engine's tensors whole, with slots[0, call.n_slots). Without
 *   // it the vtable's append_tensors is NULL and the host sends append jobs.
 *   void append_tensors(const kvc_append_slot* slots, const kvc_append_tensors_call& call);
 *   // Optional (ABI 1.6): stored rows re-encoded into other formats, jobs[0, call.n_jobs).
 *   // Without it the vtable's convert is NULL: the host never demotes rows on this backend,
 *   // and every segment a data call passes has the call's formats. With it, the backend
 *   // reads each segment's own formats (kvc_segment::own_formats) in attend, compact and
 *   // read_keys.
 *   void convert(const kvc_convert_job* jobs, const kvc_convert_call& call);
 * @endcode
 * and the library says `KVC_BACKEND_PLUGIN(B, version);` once. Every function may throw
 * (Error via kvc::plugin::fail for a status of its choice; std::bad_alloc is
 * OUT_OF_MEMORY, anything else INTERNAL); the skeleton has already checked the instance,
 * the host API (its ABI major), out-parameters, copy arguments, the config's shape and
 * parameter list, and the size of every struct and job array. Jobs and segments reach B as
 * this header's structs whatever size the host wrote: a segment from a host older than 1.6
 * (its struct_size ends before own_formats) has own_formats 0, so its rows are of the call's
 * formats. The destructor of B destroys the instance and must not throw.
 */
#ifndef KVCACHE_KVCACHE_BACKEND_PLUGIN_HPP
#define KVCACHE_KVCACHE_BACKEND_PLUGIN_HPP

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <utility>

#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_plugin.h"
#include "kvcache/kvcache_plugin_support.hpp"
#include "kvcache/kvcache_rotation.h"

/** @cond internal */
namespace kvc::plugin {

// The host API a backend is created with: present and of this plugin's ABI major.
inline void check_host(const kvc_host_api* host) {
  if (host == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "host API is NULL");
  const unsigned major = host->abi_version >> 16;
  if (major != KVC_PLUGIN_ABI_MAJOR)
    fail(KVC_ERR_PLUGIN, "host plugin ABI major %u, built for %d", major, KVC_PLUGIN_ABI_MAJOR);
}

// A creation config read as this header's struct, its shape and parameter list checked.
inline kvc_backend_config read_config(const kvc_backend_config* given) {
  // The 1.3 host's config (before k_rotation) is the smallest.
  const auto config = read_host_struct(given, offsetof(kvc_backend_config, k_rotation),
                                       "backend config");
  if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 ||
      config.n_q_heads < config.n_kv_heads)
    fail(KVC_ERR_INVALID_ARGUMENT, "backend config: bad shape (%d layers, %d KV heads, %d query "
         "heads, head_dim %d)", config.n_layers, config.n_kv_heads, config.n_q_heads,
         config.head_dim);
  if (config.n_params > 0 && config.params == nullptr)
    fail(KVC_ERR_INVALID_ARGUMENT, "backend config: params are NULL");
  for (size_t i = 0; i < config.n_params; ++i)
    if (config.params[i].key == nullptr || config.params[i].value == nullptr)
      fail(KVC_ERR_INVALID_ARGUMENT, "backend config: parameter %zu has a NULL key or value", i);
  return config;
}

// Which of a segment's arrays a call reads: read_tokens reads positions only, and the host may
// send it segments without K and V.
enum class Reads { rows_and_positions, positions };

// The number of tokens in job `job`'s segment list, checking each segment's count and the
// pointers the call reads.
inline int64_t count_segment_tokens(const kvc_segment* segments, int32_t n_segments,
                                    const char* call, size_t job,
                                    Reads reads = Reads::rows_and_positions) {
  if (n_segments < 0 || (n_segments > 0 && segments == nullptr))
    fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: bad segment list", call, job);
  int64_t tokens = 0;
  for (int32_t s = 0; s < n_segments; ++s) {
    if (segments[s].count < 0)
      fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: segment %d has a negative count", call, job, s);
    const bool rows_missing =
        reads == Reads::rows_and_positions && (!segments[s].k || !segments[s].v);
    if (segments[s].count > 0 && (rows_missing || !segments[s].pos))
      fail(KVC_ERR_INVALID_ARGUMENT, "%s job %zu: segment %d has a NULL pointer", call, job, s);
    tokens += segments[s].count;
  }
  return tokens;
}

// For a backend that takes no `backend.params`: KVC_ERR_CONFIG naming the first one.
inline void refuse_params(const kvc_backend_config& config) {
  if (config.n_params > 0)
    fail(KVC_ERR_CONFIG, "backend.params.%s: unknown key, this backend takes no parameters",
         config.params[0].key);
}

// Whether backend class B applies kvc_backend_config::k_rotation (declares
// `static constexpr bool kRotatesK = true`).
template <class B, class = void>
struct RotatesK : std::false_type {};
template <class B>
struct RotatesK<B, std::void_t<decltype(B::kRotatesK)>> : std::bool_constant<B::kRotatesK> {};

// A rotation of K for a backend that does not apply it: KVC_ERR_UNSUPPORTED naming it.
template <class B>
void check_rotation(const kvc_backend_config& config) {
  if (config.k_rotation != KVC_ROTATION_NONE && !RotatesK<B>::value)
    fail(KVC_ERR_UNSUPPORTED, "k_rotation %s: this backend does not rotate K (use none)",
         kvc_rotation_name(config.k_rotation));
}

// Whether backend class B has the optional append_tensors.
template <class B, class = void>
struct HasAppendTensors : std::false_type {};
template <class B>
struct HasAppendTensors<B, std::void_t<decltype(std::declval<B&>().append_tensors(
                               std::declval<const kvc_append_slot*>(),
                               std::declval<const kvc_append_tensors_call&>()))>>
    : std::true_type {};

// Whether backend class B has the optional convert.
template <class B, class = void>
struct HasConvert : std::false_type {};
template <class B>
struct HasConvert<B, std::void_t<decltype(std::declval<B&>().convert(
                         std::declval<const kvc_convert_job*>(),
                         std::declval<const kvc_convert_call&>()))>> : std::true_type {};

// The fields of an append_tensors call and its slots: shape, formats, pointers, and every slot
// inside the tensors. The tensors themselves were checked by the host.
inline void check_append_tensors(const kvc_append_tensors_call& call,
                                 const kvc_append_slot* slots) {
  if (call.head_dim <= 0 || call.n_kv_heads <= 0 || call.n_tokens < 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "append_tensors call: bad shape (head_dim %d, %d KV heads, "
         "%d tokens)", call.head_dim, call.n_kv_heads, call.n_tokens);
  if (!kvc_format_takes_input(call.k_dtype, call.src_k_dtype))
    fail(KVC_ERR_INVALID_ARGUMENT, "append_tensors call: K's format %s cannot take source "
         "dtype %d", kvc_format_name(call.k_dtype), int(call.src_k_dtype));
  if (!kvc_format_takes_input(call.v_dtype, call.src_v_dtype))
    fail(KVC_ERR_INVALID_ARGUMENT, "append_tensors call: V's format %s cannot take source "
         "dtype %d", kvc_format_name(call.v_dtype), int(call.src_v_dtype));
  if (call.n_slots > 0 && (!call.src_k || !call.src_v || !call.src_pos))
    fail(KVC_ERR_INVALID_ARGUMENT, "append_tensors call: a NULL source");
  for (size_t i = 0; i < call.n_slots; ++i) {
    const kvc_append_slot& slot = slots[i];
    if (slot.n_tokens < 0 || slot.first_token < 0 ||
        int64_t(slot.first_token) + slot.n_tokens > call.n_tokens || slot.kv_head < 0 ||
        slot.kv_head >= call.n_kv_heads)
      fail(KVC_ERR_INVALID_ARGUMENT, "append_tensors slot %zu: tokens [%d, +%d) of KV head %d "
           "lie outside the call's %d tokens and %d KV heads", i, slot.first_token,
           slot.n_tokens, slot.kv_head, call.n_tokens, call.n_kv_heads);
    if (slot.n_tokens > 0 && (!slot.dst_k || !slot.dst_v || !slot.dst_pos))
      fail(KVC_ERR_INVALID_ARGUMENT, "append_tensors slot %zu has a NULL destination", i);
  }
}

// The vtable of backend class B (see the file comment).
template <class B>
class BackendAdapter {
 public:
  static const kvc_backend_vtable vtable;

 private:
  static B& self(void* instance) {
    if (instance == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "backend instance is NULL");
    return *static_cast<B*>(instance);
  }

  static void make(const kvc_host_api* host, const kvc_backend_config* config,
                   void** out_instance) {
    if (out_instance == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "out_instance is NULL");
    check_host(host);
    *out_instance = B::create(*host, config);
  }

  static int32_t create(const kvc_host_api* host, void** out_instance,
                        kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] { make(host, nullptr, out_instance); });
  }

  static int32_t create_with_config(const kvc_host_api* host, const kvc_backend_config* given,
                                    void** out_instance, kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] {
      const kvc_backend_config config = read_config(given);
      check_rotation<B>(config);
      make(host, &config, out_instance);
    });
  }

  static void destroy(void* instance) noexcept { delete static_cast<B*>(instance); }

  static void* alloc(void* instance, size_t bytes) noexcept {
    return instance == nullptr ? nullptr : static_cast<B*>(instance)->alloc(bytes);
  }

  static void free_memory(void* instance, void* ptr) noexcept {
    if (instance != nullptr && ptr != nullptr) static_cast<B*>(instance)->free(ptr);
  }

  static void free_async(void* instance, void* ptr, void* stream) noexcept {
    if (instance != nullptr && ptr != nullptr) static_cast<B*>(instance)->free_async(ptr, stream);
  }

  static void checked_copy(void* instance, void* dst, const void* src, size_t bytes,
                           kvc_copy_kind kind, void* stream) {
    if (kind != KVC_COPY_HOST_TO_DEVICE && kind != KVC_COPY_DEVICE_TO_HOST &&
        kind != KVC_COPY_DEVICE_TO_DEVICE)
      fail(KVC_ERR_INVALID_ARGUMENT, "unknown copy kind %d", int(kind));
    B& backend = self(instance);
    if (bytes == 0) return;
    if (dst == nullptr || src == nullptr)
      fail(KVC_ERR_INVALID_ARGUMENT, "copy with a NULL pointer");
    backend.copy(dst, src, bytes, kind, stream);
  }

  static int32_t copy(void* instance, void* dst, const void* src, size_t bytes,
                      kvc_copy_kind kind, kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] { checked_copy(instance, dst, src, bytes, kind, nullptr); });
  }

  static int32_t copy_async(void* instance, void* dst, const void* src, size_t bytes,
                            kvc_copy_kind kind, void* stream, kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] { checked_copy(instance, dst, src, bytes, kind, stream); });
  }

  static int32_t synchronize(void* instance, void* stream, kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] { self(instance).synchronize(stream); });
  }

  // Reads the call and its jobs as this header's structs, then runs `run`.
  template <class Call, class Job, class Run>
  static int32_t data_call(void* instance, const Call* given, size_t min_call, size_t min_job,
                           const char* name, kvc_plugin_error* error, Run run) noexcept {
    return report_errors(error, [&] {
      char what[48];
      std::snprintf(what, sizeof what, "%s call", name);
      Call call = read_host_struct(given, min_call, what);
      complete_formats(call, given);
      const HostJobs<Job> jobs(call.jobs, call.n_jobs, min_job, name);
      run(self(instance), jobs.data(), call);
    });
  }

  static int32_t append(void* instance, const kvc_append_call* call,
                        kvc_plugin_error* error) noexcept {
    return data_call<kvc_append_call, kvc_append_job>(
        instance, call, sizeof(kvc_append_call), sizeof(kvc_append_job), "append", error,
        [](B& b, const kvc_append_job* jobs, const kvc_append_call& c) { b.append(jobs, c); });
  }

  static int32_t append_tensors(void* instance, const kvc_append_tensors_call* given,
                                kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] {
      const kvc_append_tensors_call call =
          read_host_struct(given, offsetof(kvc_append_tensors_call, k_rotated),
                           "append_tensors call");
      const HostJobs<kvc_append_slot> slots(call.slots, call.n_slots, sizeof(kvc_append_slot),
                                            "append_tensors");
      check_append_tensors(call, slots.data());
      self(instance).append_tensors(slots.data(), call);
    });
  }

 public:
  // The vtable entry: NULL when B lacks append_tensors.
  static constexpr auto append_tensors_entry() {
    using Entry = int32_t (*)(void*, const kvc_append_tensors_call*, kvc_plugin_error*);
    if constexpr (HasAppendTensors<B>::value) return Entry(&append_tensors);
    else return Entry(nullptr);
  }

  // The vtable entry: NULL when B lacks convert.
  static constexpr auto convert_entry() {
    using Entry = int32_t (*)(void*, const kvc_convert_call*, kvc_plugin_error*);
    if constexpr (HasConvert<B>::value) return Entry(&convert);
    else return Entry(nullptr);
  }

 private:
  static int32_t attend(void* instance, const kvc_attend_call* call,
                        kvc_plugin_error* error) noexcept {
    return data_call<kvc_attend_call, kvc_attend_job>(
        instance, call, sizeof(kvc_attend_call), sizeof(kvc_attend_job), "attend", error,
        [](B& b, const kvc_attend_job* jobs, const kvc_attend_call& c) { b.attend(jobs, c); });
  }

  static int32_t compact(void* instance, const kvc_compact_call* call,
                         kvc_plugin_error* error) noexcept {
    return data_call<kvc_compact_call, kvc_compact_job>(
        instance, call, sizeof(kvc_compact_call), sizeof(kvc_compact_job), "compact", error,
        [](B& b, const kvc_compact_job* jobs, const kvc_compact_call& c) { b.compact(jobs, c); });
  }

  static int32_t read_keys(void* instance, const kvc_read_keys_call* call,
                           kvc_plugin_error* error) noexcept {
    return data_call<kvc_read_keys_call, kvc_read_keys_job>(
        instance, call, sizeof(kvc_read_keys_call), sizeof(kvc_read_keys_job), "read_keys",
        error, [](B& b, const kvc_read_keys_job* jobs, const kvc_read_keys_call& c) {
          b.read_keys(jobs, c);
        });
  }

  static int32_t read_tokens(void* instance, const kvc_read_tokens_call* call,
                             kvc_plugin_error* error) noexcept {
    return data_call<kvc_read_tokens_call, kvc_read_tokens_job>(
        instance, call, sizeof(kvc_read_tokens_call), sizeof(kvc_read_tokens_job),
        "read_tokens", error,
        [](B& b, const kvc_read_tokens_job* jobs, const kvc_read_tokens_call& c) {
          b.read_tokens(jobs, c);
        });
  }

  // Both structs are of 1.6, which introduced them: no smaller size is valid.
  static int32_t convert(void* instance, const kvc_convert_call* call,
                         kvc_plugin_error* error) noexcept {
    return data_call<kvc_convert_call, kvc_convert_job>(
        instance, call, sizeof(kvc_convert_call), sizeof(kvc_convert_job), "convert", error,
        [](B& b, const kvc_convert_job* jobs, const kvc_convert_call& c) { b.convert(jobs, c); });
  }
};

template <class B>
const kvc_backend_vtable BackendAdapter<B>::vtable = {
    sizeof(kvc_backend_vtable), &create,   &destroy,  &alloc,       &free_memory,
    &copy,                      &append,   &attend,   &compact,     &read_keys,
    &read_tokens,               &create_with_config,  &copy_async,  &free_async,
    &synchronize,               append_tensors_entry(), convert_entry(),
};

// The descriptor of backend class B; `version` is the plugin's own.
template <class B>
constexpr kvc_plugin_descriptor backend_descriptor(uint32_t version) {
  return {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_BACKEND, B::kName,
          version, &BackendAdapter<B>::vtable};
}

// The entry point's body for a library holding the one descriptor.
inline int32_t backend_entry(const kvc_plugin_descriptor* descriptor,
                             const kvc_plugin_descriptor** out_descriptors, size_t* out_count,
                             kvc_plugin_error* error) noexcept {
  if (out_descriptors == nullptr || out_count == nullptr) {
    write_labelled_error(error, "kvc_plugin_entry needs its out-parameters");
    return KVC_ERR_INVALID_ARGUMENT;
  }
  *out_descriptors = descriptor;
  *out_count = 1;
  return KVC_OK;
}

}  // namespace kvc::plugin
/** @endcond */

/** @brief Defines the library's plugin_label() and its one exported symbol, the entry point
 * returning the descriptor of backend class @p Class at plugin version @p Version. */
#define KVC_BACKEND_PLUGIN(Class, Version)                                                    \
  const char* kvc::plugin::plugin_label() { return Class::kLabel; }                           \
  namespace {                                                                                 \
  constexpr kvc_plugin_descriptor kvc_backend_plugin_descriptor =                            \
      ::kvc::plugin::backend_descriptor<Class>(Version);                                      \
  }                                                                                           \
  extern "C" KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(                                      \
      const kvc_host_api* /*host*/, const kvc_plugin_descriptor** out_descriptors,            \
      size_t* out_count, kvc_plugin_error* error) {                                           \
    return ::kvc::plugin::backend_entry(&kvc_backend_plugin_descriptor, out_descriptors,      \
                                        out_count, error);                                    \
  }                                                                                           \
  static_assert(std::is_same_v<decltype(&kvc_plugin_entry), kvc_plugin_entry_fn>,             \
                "kvc_plugin_entry must match kvc_plugin_entry_fn")

#endif  // KVCACHE_KVCACHE_BACKEND_PLUGIN_HPP
