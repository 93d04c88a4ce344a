/**
 * @file kvcache_plugin.h
 * @brief The plugin ABI: what a policy or backend shared library exports, and the host API
 * kvcache hands it. C only; plugins never link libkvcache.
 *
 * A plugin library exports one C function, `kvc_plugin_entry` (::kvc_plugin_entry_fn), marked
 * ::KVC_PLUGIN_EXPORT. The host calls it once after loading, passing its ::kvc_host_api; the
 * function returns an array of descriptors (one library may export several plugins).
 * Descriptors, their names and vtables must stay valid while the library is loaded; the host
 * keeps the library loaded for the lifetime of the context, and the ::kvc_host_api it passes
 * is valid for that long too.
 *
 * @section abi_versions How the ABI grows
 * `abi_version` is KVC_PLUGIN_ABI_MAJOR << 16 | KVC_PLUGIN_ABI_MINOR. A major change breaks
 * plugins and the host refuses a plugin of another major. A minor version only appends
 * fields at the end of structs (and entries at the end of vtables); it never moves, removes
 * or changes the meaning of one. Every struct that crosses the ABI starts with
 * `uint32_t struct_size`, the sizeof the writer was built with, and the reader of a struct
 * reads only the fields that lie wholly inside `struct_size` (::KVC_PLUGIN_HAS_FIELD); a
 * field beyond it reads as 0 / NULL, which always means "absent" or "the 1.0 behaviour".
 *
 * - Arrays of jobs and segments are strided by the `struct_size` of their first element
 *   (all elements of an array have the same size): step through them with
 *   ::KVC_PLUGIN_AT, never with `jobs[i]`.
 * - Structs the host writes (host API, calls, jobs, segments, budget requests) carry the
 *   host's size. An older plugin ignores the trailing fields it does not know; a newer
 *   plugin on an older host finds its newer fields absent and must either do without them or
 *   fail its call with KVC_ERR_PLUGIN and a message saying which kvcache it needs.
 * - Structs the plugin writes (descriptors, vtables) carry the plugin's size. The host reads
 *   a smaller one with the missing entries as NULL (an older plugin: every entry added after
 *   its minor is optional, and the host does without it). A larger one is accepted only when
 *   every byte the host does not know is zero; otherwise the plugin needs something this host
 *   lacks and is refused with a message naming the file, the plugin and both versions.
 * - Structs the host hands to the plugin to fill (::kvc_policy_needs) carry the host's size:
 *   the plugin writes only the fields inside it.
 *
 * Versions: 1.0 is the first frozen ABI (a copy is kept under tests/plugin_abi/1.0 and a test
 * plugin built against it loads on every later 1.x host). 1.1 appended
 * kvc_backend_vtable::read_tokens (batched reads of positions and statistics; optional) and
 * kvc_score_job::sink_end / kvc_score_job::recent_begin (the range the host protects). 1.2
 * added the store kind (KVC_PLUGIN_STORE, ::kvc_store_vtable); a host refuses a store
 * descriptor from a plugin built against an older minor. 1.3 appended to ::kvc_backend_vtable
 * create_with_config (the cache's shape, formats, device and `backend.params`, which the
 * backend may refuse) and the stream-ordered copy_async, free_async and synchronize (all
 * optional). 1.4 appended kvc_attend_job::table_id and kvc_attend_job::table_version, which
 * let a backend keep a head's segment table resident between calls (@ref abi_tables), and
 * kvc_backend_vtable::append_tensors (::kvc_append_tensors_call: the engine's K and V whole,
 * once, with a list of ::kvc_append_slot; optional: a backend without it gets the same append
 * as ::kvc_append_job entries through kvc_backend_vtable::append). 1.5 appended
 * kvc_backend_config::k_rotation (the cache's ::kvc_rotation of K, which a backend that does
 * not apply it refuses) and kvc_append_tensors_call::k_rotated (stored rows, not rotated
 * again); a host asks for a rotation only of a backend built against 1.5 or later with
 * create_with_config and append_tensors. 1.6 appended kvc_segment::own_formats (a segment
 * whose rows are of other formats than the call's: a head's demoted tier) and
 * kvc_backend_vtable::convert (::kvc_convert_call: stored rows re-encoded into another
 * format); a host demotes only on a backend that has convert.
 *
 * @section abi_memory Where memory lives
 * Pointers into storage (segments, statistics, `dst_*`) are backend memory. Every other
 * pointer is host memory unless a `*_device` field beside it says KVC_DEVICE_BACKEND. Calls
 * carry a `stream`: the engine's stream or queue handle for device backends (NULL: the
 * backend's default); the CPU backend ignores it. A backend need not finish the work of a
 * call before returning when nothing it wrote is host memory; every call that writes host
 * memory (copy to the host, read_keys, read_tokens, attend into host `out`) returns only when
 * that memory is written.
 *
 * @section abi_tables Resident segment tables
 * An attend job lists its head's segments (::kvc_segment) on every call, in host memory. A
 * device backend that would upload that list each call may instead keep a copy in its own
 * memory keyed by kvc_attend_job::table_id and reuse it while kvc_attend_job::table_version
 * is unchanged: the host mints a new version whenever the list changes other than in its
 * counts (a segment added, dropped or replaced; growth, copy-on-write, compaction,
 * truncation, import, rollback). The counts need not be uploaded either: every segment of a
 * job but the last holds as many tokens as the first (a paged head's full blocks; a
 * contiguous head has one segment), so they follow from their sum. Ids are never reused while
 * the library is loaded, and the host does not say when a head is gone: a resident copy is a
 * cache the backend bounds itself. A job without them (0, an older host, or a head holding a
 * demoted tier, whose blocks hold another count) gives no such promise.
 *
 * Errors: plugin functions return a ::kvc_status_code and, on failure, write a message into
 * the ::kvc_plugin_error they are given. No C++ exception may leave a plugin function.
 *
 * Threading: the host may call the functions of one backend instance from several threads
 * at once, on disjoint memory; policy functions may be called concurrently for different
 * sequences; store functions may be called concurrently with any keys.
 */
#ifndef KVCACHE_KVCACHE_PLUGIN_H
#define KVCACHE_KVCACHE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Plugin ABI major: a plugin built for another major is refused. */
#define KVC_PLUGIN_ABI_MAJOR 1
/** @brief Plugin ABI minor: grows when fields are appended to structs. */
#define KVC_PLUGIN_ABI_MINOR 6
/** @brief The value of kvc_plugin_descriptor::abi_version for this header. */
#define KVC_PLUGIN_ABI_VERSION ((KVC_PLUGIN_ABI_MAJOR << 16) | KVC_PLUGIN_ABI_MINOR)
/** @brief Marks a plugin's entry point as exported from its shared library. */
#if defined(_WIN32)
#define KVC_PLUGIN_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define KVC_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define KVC_PLUGIN_EXPORT
#endif

/** @brief Nonzero when @p field of the struct @p type at @p ptr lies inside its struct_size. */
#define KVC_PLUGIN_HAS_FIELD(ptr, type, field) \
  ((size_t)(ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

/** @brief Element @p index of an array of @p type strided by its first element's struct_size. */
#define KVC_PLUGIN_AT(type, array, index) \
  ((type *)((const char *)(array) + (size_t)(index) * (array)->struct_size))

/** @brief Name of the symbol every plugin library exports. */
#define KVC_PLUGIN_ENTRY_SYMBOL "kvc_plugin_entry"

/** @brief Room for an error message written by a plugin (UTF-8, NUL-terminated). */
typedef struct kvc_plugin_error {
  char message[512]; /**< NUL-terminated; truncated by the plugin if longer */
} kvc_plugin_error;

/** @brief A body run by kvc_host_api::parallel_for over the index range [begin, end). */
typedef void (*kvc_range_fn)(void *user_data, size_t begin, size_t end);

/**
 * @brief Services the host gives plugins. Valid for the context's lifetime; every function
 * is thread-safe.
 */
typedef struct kvc_host_api {
  uint32_t struct_size;  /**< sizeof(kvc_host_api) of the host */
  uint32_t abi_version;  /**< KVC_PLUGIN_ABI_VERSION of the host */
  void *host; /**< pass back as the first argument of every function below */
  /** Writes a message to the context's logger. */
  void (*log)(void *host, kvc_log_level level, const char *message);
  /** Runs body over [0, n) in parallel chunks of at least @p grain on the context's arena;
   * returns when every chunk is done. */
  void (*parallel_for)(void *host, size_t n, size_t grain, kvc_range_fn body, void *user_data);
  /** Aligned host memory (NULL on failure) and its release. */
  void *(*alloc)(void *host, size_t bytes, size_t alignment);
  /** Releases memory from alloc; accepts NULL. */
  void (*free)(void *host, void *ptr);
} kvc_host_api;

/** @brief What one plugin is; returned by the entry point. */
typedef struct kvc_plugin_descriptor {
  uint32_t struct_size;  /**< sizeof(kvc_plugin_descriptor) the plugin was built with */
  uint32_t abi_version;  /**< KVC_PLUGIN_ABI_VERSION the plugin was built against */
  kvc_plugin_kind kind;  /**< which vtable type `vtable` points to */
  const char *name;      /**< unique per kind, used in YAML */
  uint32_t version;      /**< the plugin's own version */
  const void *vtable;    /**< a ::kvc_backend_vtable, ::kvc_policy_vtable or (1.2)
                              ::kvc_store_vtable, by kind */
} kvc_plugin_descriptor;

/**
 * @brief The one exported entry point: stores an array of @p *out_count descriptors in
 * @p *out_descriptors and returns KVC_OK, or an error code with a message in @p error.
 * Descriptors are strided by the first one's struct_size.
 */
typedef int32_t (*kvc_plugin_entry_fn)(const kvc_host_api *host,
                                       const kvc_plugin_descriptor **out_descriptors,
                                       size_t *out_count, kvc_plugin_error *error);

/* --------------------------------------------------------------- backends */

/** @brief A run of stored tokens of one (sequence, layer, KV head), in backend memory. */
typedef struct kvc_segment {
  uint32_t struct_size;  /**< sizeof(kvc_segment) of the host */
  int32_t count;         /**< tokens in this segment */
  const void *k;         /**< [count] rows of the K format (kvcache_format.h), opaque bytes */
  const void *v;         /**< [count] rows of the V format, likewise */
  const int32_t *pos;    /**< [count] absolute positions */
  /** (1.6) Nonzero: this segment's rows are of k_dtype and v_dtype below, not of the call's
   * formats (a head holding tokens in more than one format: demoted tiers). 0, or outside
   * struct_size: the call's formats. A backend that cannot read a segment's formats fails
   * the call with KVC_ERR_UNSUPPORTED. */
  int32_t own_formats;
  kvc_dtype k_dtype;     /**< (1.6) with own_formats: the format of k's rows */
  kvc_dtype v_dtype;     /**< (1.6) with own_formats: the format of v's rows */
} kvc_segment;

/**
 * @brief The per-token statistics of one (sequence, layer, KV head), in backend memory,
 * indexed by token index counted across the head's segments in order (see ::kvc_stat_flags).
 * Each pointer is NULL when the cache does not track that statistic.
 */
typedef struct kvc_head_stats {
  float *attn_sum;       /**< KVC_STAT_ATTN_SUM, or NULL */
  float *attn_last;      /**< KVC_STAT_ATTN_LAST, or NULL */
  float *attn_window;    /**< KVC_STAT_ATTN_WINDOW, or NULL */
} kvc_head_stats;

/** @brief Copy @p n_tokens new tokens of one KV head into one run of storage. */
typedef struct kvc_append_job {
  uint32_t struct_size;      /**< sizeof(kvc_append_job) of the host */
  int32_t n_tokens;          /**< tokens to copy, >= 1 */
  const void *src_k;         /**< first token's head row; tokens are src_stride elements apart */
  const void *src_v;         /**< like src_k, for V */
  size_t src_k_stride;       /**< elements between consecutive K source rows */
  size_t src_v_stride;       /**< elements between consecutive V source rows */
  kvc_dtype src_dtype;       /**< of src_k (and src_v without src_v_dtype): f32 or K's format */
  kvc_device src_device;     /**< where src_k and src_v live */
  const int32_t *src_pos;    /**< [n_tokens], host memory */
  void *dst_k;               /**< [n_tokens] rows of the K format */
  void *dst_v;               /**< [n_tokens] rows of the V format */
  int32_t *dst_pos;          /**< [n_tokens] */
  /** The new tokens' entries of each tracked statistic ([n_tokens] each), set to 0. */
  kvc_head_stats dst_stats;
  /** (1.3) Of src_v: f32 or V's format; outside struct_size (an older host): src_dtype. */
  kvc_dtype src_v_dtype;
} kvc_append_job;

/** @brief One append call: jobs write disjoint memory. */
typedef struct kvc_append_call {
  uint32_t struct_size;      /**< sizeof(kvc_append_call) of the host */
  int32_t head_dim;          /**< elements per head row */
  kvc_dtype storage_dtype;   /**< format of stored K; of V too when v_dtype is not set */
  void *stream;              /**< the engine's stream or queue, or NULL */
  const kvc_append_job *jobs; /**< [n_jobs], host array, strided by struct_size */
  size_t n_jobs;             /**< entries in jobs */
  /** (1.3) Format of stored V; outside struct_size (an older host): storage_dtype. */
  kvc_dtype v_dtype;
} kvc_append_call;

/** @brief (1.4) Where the rows [first_token, first_token + n_tokens) of one KV head of the
 * tensors of a ::kvc_append_tensors_call go: one run of storage. */
typedef struct kvc_append_slot {
  uint32_t struct_size;      /**< sizeof(kvc_append_slot) of the host */
  int32_t first_token;       /**< the first tensor row, >= 0 */
  int32_t n_tokens;          /**< rows to copy, >= 1; first_token + n_tokens <= the call's */
  int32_t kv_head;           /**< the KV head, 0 <= kv_head < the call's n_kv_heads */
  void *dst_k;               /**< [n_tokens] rows of the K format */
  void *dst_v;               /**< [n_tokens] rows of the V format */
  int32_t *dst_pos;          /**< [n_tokens], written from src_pos[first_token...] */
  /** The new tokens' entries of each tracked statistic ([n_tokens] each), set to 0. */
  kvc_head_stats dst_stats;
} kvc_append_slot;

/**
 * @brief (1.4) One append of the engine's K and V tensors, whole: the element of token t,
 * KV head h, index i of K is at src_k + (t * src_k_token_stride + h * src_k_head_stride + i)
 * elements of src_k_dtype (V likewise). The slots cover each (token, KV head) pair at most
 * once and write disjoint memory; the backend chooses how to split the copy. The host has
 * checked the tensors against the cache's shape.
 */
typedef struct kvc_append_tensors_call {
  uint32_t struct_size;      /**< sizeof(kvc_append_tensors_call) of the host */
  int32_t head_dim;          /**< elements per head row */
  int32_t n_kv_heads;        /**< KV heads per tensor row */
  int32_t n_tokens;          /**< rows of the tensors, >= 1 */
  kvc_dtype k_dtype;         /**< storage format of K */
  kvc_dtype v_dtype;         /**< storage format of V */
  void *stream;              /**< the engine's stream or queue, or NULL */
  const void *src_k;         /**< token 0, KV head 0 of K */
  const void *src_v;         /**< token 0, KV head 0 of V */
  kvc_dtype src_k_dtype;     /**< of src_k: f32 or k_dtype */
  kvc_dtype src_v_dtype;     /**< of src_v: f32 or v_dtype */
  kvc_device src_device;     /**< where src_k and src_v live */
  size_t src_k_token_stride; /**< elements between consecutive tokens of K */
  size_t src_k_head_stride;  /**< elements between consecutive KV heads of one token of K */
  size_t src_v_token_stride; /**< elements between consecutive tokens of V */
  size_t src_v_head_stride;  /**< elements between consecutive KV heads of one token of V */
  const int32_t *src_pos;    /**< [n_tokens] positions of the rows, host memory */
  const kvc_append_slot *slots; /**< [n_slots], host array, strided by struct_size */
  size_t n_slots;            /**< entries in slots */
  /** (1.5) Nonzero: src_k holds stored rows, already rotated by kvc_backend_config::k_rotation
   * (an import, a restore, a prefix load), stored as they are; 0: the engine's K, which the
   * backend rotates before storing it. */
  int32_t k_rotated;
} kvc_append_tensors_call;

/** @brief Attention of the query tokens of one sequence and one KV head's query group. The
 * backend tiles the queries itself. */
typedef struct kvc_attend_job {
  uint32_t struct_size;      /**< sizeof(kvc_attend_job) of the host */
  int32_t n_queries;         /**< query tokens, >= 1 */
  const void *q;             /**< first query token, first head of the group */
  size_t q_stride;           /**< elements between query tokens */
  kvc_dtype q_dtype;         /**< f32 or the storage format of K */
  kvc_device q_device;       /**< where q lives */
  const int32_t *q_pos;      /**< [n_queries] absolute positions, host memory */
  float *out;                /**< first output token, first head of the group; f32 */
  size_t out_stride;         /**< elements between output tokens */
  kvc_device out_device;     /**< where out lives */
  const kvc_segment *segments; /**< the stored tokens, in storage order; host array */
  int32_t n_segments;        /**< entries in segments */
  /** Statistics the attention updates (see ::kvc_stat_flags); all NULL when none is tracked.
   * When any is set, the job holds every new query of its (sequence, KV head). */
  kvc_head_stats stats;
  /** (1.4) The identity of this head's segment table (@ref abi_tables); 0: not given. */
  uint64_t table_id;
  /** (1.4) Changes whenever the segment list changes other than in its counts (@ref
   * abi_tables); 0: not given. */
  uint64_t table_version;
} kvc_attend_job;

/** @brief One attention call: shape and options shared by its jobs; jobs write disjoint
 * output rows and statistics. */
typedef struct kvc_attend_call {
  uint32_t struct_size;      /**< sizeof(kvc_attend_call) of the host */
  int32_t head_dim;          /**< elements per head row */
  int32_t group_size;        /**< query heads per KV head; their rows are adjacent in q/out */
  kvc_dtype storage_dtype;   /**< format of stored K; of V too when v_dtype is not set */
  float scale;               /**< logit scale, > 0 */
  int32_t sliding_window;    /**< > 0: keys at positions (p - window, p] */
  float softcap;             /**< > 0: softcap * tanh(logit / softcap) */
  /** Queries at the end of each job whose attention feeds attn_window (>= 1 when any job
   * has stats.attn_window). */
  int32_t observation_window;
  void *stream;              /**< the engine's stream or queue, or NULL */
  const kvc_attend_job *jobs; /**< [n_jobs], host array, strided by struct_size */
  size_t n_jobs;             /**< entries in jobs */
  /** (1.3) Format of stored V; outside struct_size (an older host): storage_dtype. */
  kvc_dtype v_dtype;
} kvc_attend_call;

/**
 * @brief Compaction of one (sequence, layer, KV head): moves the tokens at indices keep[0..n_keep)
 * (increasing, counted across the segments in order) to indices 0..n_keep-1, with their K, V,
 * position and every non-NULL statistic. The backend writes through the segments' pointers.
 */
typedef struct kvc_compact_job {
  uint32_t struct_size;      /**< sizeof(kvc_compact_job) of the host */
  int32_t n_segments;        /**< entries in segments */
  const kvc_segment *segments; /**< the head's storage, in order; host array */
  const int32_t *keep;       /**< [n_keep] increasing token indices, host memory */
  int32_t n_keep;            /**< tokens kept */
  kvc_head_stats stats;      /**< the head's statistics, moved with their tokens */
} kvc_compact_job;

/** @brief One compaction call: jobs touch disjoint storage. */
typedef struct kvc_compact_call {
  uint32_t struct_size;      /**< sizeof(kvc_compact_call) of the host */
  int32_t head_dim;          /**< elements per head row */
  kvc_dtype storage_dtype;   /**< format of stored K; of V too when v_dtype is not set */
  void *stream;              /**< the engine's stream or queue, or NULL */
  const kvc_compact_job *jobs; /**< [n_jobs], host array, strided by struct_size */
  size_t n_jobs;             /**< entries in jobs */
  /** (1.3) Format of stored V; outside struct_size (an older host): storage_dtype. */
  kvc_dtype v_dtype;
} kvc_compact_call;

/** @brief Reads the keys of one (sequence, layer, KV head) as f32 rows into host memory. */
typedef struct kvc_read_keys_job {
  uint32_t struct_size;      /**< sizeof(kvc_read_keys_job) of the host */
  int32_t n_segments;        /**< entries in segments */
  const kvc_segment *segments; /**< the head's storage, in order; host array */
  float *out;                /**< [sum of counts, head_dim], host memory */
} kvc_read_keys_job;

/** @brief One read_keys call: jobs write disjoint output. */
typedef struct kvc_read_keys_call {
  uint32_t struct_size;      /**< sizeof(kvc_read_keys_call) of the host */
  int32_t head_dim;          /**< elements per head row */
  kvc_dtype storage_dtype;   /**< format of stored K */
  void *stream;              /**< the engine's stream or queue, or NULL */
  const kvc_read_keys_job *jobs; /**< [n_jobs], host array, strided by struct_size */
  size_t n_jobs;             /**< entries in jobs */
} kvc_read_keys_call;

/** @brief (1.1) Reads the positions and statistics of one (sequence, layer, KV head) into
 * host memory: every non-NULL `out_*` gets [sum of counts] entries. */
typedef struct kvc_read_tokens_job {
  uint32_t struct_size;      /**< sizeof(kvc_read_tokens_job) of the host */
  int32_t n_segments;        /**< entries in segments */
  const kvc_segment *segments; /**< the head's storage, in order; host array */
  kvc_head_stats stats;      /**< the head's statistics (backend memory) */
  int32_t *out_pos;          /**< positions, or NULL */
  float *out_attn_sum;       /**< stats.attn_sum, or NULL */
  float *out_attn_last;      /**< stats.attn_last, or NULL */
  float *out_attn_window;    /**< stats.attn_window, or NULL */
} kvc_read_tokens_job;

/** @brief (1.1) One read_tokens call: jobs write disjoint output. */
typedef struct kvc_read_tokens_call {
  uint32_t struct_size;      /**< sizeof(kvc_read_tokens_call) of the host */
  void *stream;              /**< the engine's stream or queue, or NULL */
  const kvc_read_tokens_job *jobs; /**< [n_jobs], host array, strided by struct_size */
  size_t n_jobs;             /**< entries in jobs */
} kvc_read_tokens_call;

/** @brief (1.6) Copies @p n_tokens consecutive stored rows of K and V into other storage,
 * converting each row from the source's formats to the destination's (the same formats: a
 * plain copy). Converting keeps a rotated K rotated (the rotation is per row). Source and
 * destination do not overlap. */
typedef struct kvc_convert_job {
  uint32_t struct_size;      /**< sizeof(kvc_convert_job) of the host */
  int32_t n_tokens;          /**< rows to convert, >= 1 */
  const void *src_k;         /**< [n_tokens] rows of src_k_dtype, backend memory */
  const void *src_v;         /**< [n_tokens] rows of src_v_dtype, backend memory */
  kvc_dtype src_k_dtype;     /**< storage format of the source K rows */
  kvc_dtype src_v_dtype;     /**< storage format of the source V rows */
  void *dst_k;               /**< [n_tokens] rows of dst_k_dtype, backend memory */
  void *dst_v;               /**< [n_tokens] rows of dst_v_dtype, backend memory */
  kvc_dtype dst_k_dtype;     /**< storage format of the destination K rows */
  kvc_dtype dst_v_dtype;     /**< storage format of the destination V rows */
} kvc_convert_job;

/** @brief (1.6) One convert call: jobs write disjoint memory. */
typedef struct kvc_convert_call {
  uint32_t struct_size;      /**< sizeof(kvc_convert_call) of the host */
  int32_t head_dim;          /**< elements per head row */
  void *stream;              /**< the engine's stream or queue, or NULL */
  const kvc_convert_job *jobs; /**< [n_jobs], host array, strided by struct_size */
  size_t n_jobs;             /**< entries in jobs */
} kvc_convert_call;

/** @brief Kinds of copy for kvc_backend_vtable::copy. */
typedef enum kvc_copy_kind {
  KVC_COPY_HOST_TO_DEVICE = 0,
  KVC_COPY_DEVICE_TO_HOST = 1,
  KVC_COPY_DEVICE_TO_DEVICE = 2
} kvc_copy_kind;

/** @brief (1.3) A backend parameter from YAML (`backend.params`), as written. */
typedef kvc_key_value kvc_backend_param;

/**
 * @brief (1.3) What a backend instance is created for: one cache's shape, storage formats,
 * device and parameters. Written by the host (its struct_size); valid during
 * kvc_backend_vtable::create_with_config only, so a backend copies what it keeps.
 */
typedef struct kvc_backend_config {
  uint32_t struct_size;   /**< sizeof(kvc_backend_config) of the host */
  int32_t n_layers;       /**< layers of the cache */
  int32_t n_kv_heads;     /**< KV heads per layer */
  int32_t n_q_heads;      /**< query heads per layer, a multiple of n_kv_heads */
  int32_t head_dim;       /**< elements per head row */
  kvc_dtype k_dtype;      /**< storage format of K */
  kvc_dtype v_dtype;      /**< storage format of V */
  kvc_layout layout;      /**< paged or contiguous storage */
  int32_t block_tokens;   /**< tokens per block of a paged cache */
  /** The device ordinal from `backend.device`; -1: the backend's choice (the CUDA backend:
   * the caller's current device). */
  int32_t device;
  size_t memory_limit;    /**< bytes the cache may take from the backend */
  const kvc_backend_param *params; /**< `backend.params` in the YAML's order; host memory */
  size_t n_params;        /**< entries in params */
  /** (1.5) The rotation of K (kvcache_rotation.h): applied to each K row the engine appends,
   * before it is stored, and to each query row at attention; rows read back (read_keys, copies)
   * are the stored ones. A backend that does not apply it refuses any other than
   * KVC_ROTATION_NONE with KVC_ERR_UNSUPPORTED. */
  kvc_rotation k_rotation;
} kvc_backend_config;

/**
 * @brief A compute backend. `create` makes an instance for one cache; every other function
 * takes that instance. Functions returning int32_t return a ::kvc_status_code. Entries up to
 * read_keys are required (ABI 1.0); later ones are optional.
 *
 * Streams (1.3): copy_async, free_async and synchronize are present together or not at all
 * (the host refuses a plugin with some of them). With them the host orders its copies and
 * frees on the engine's stream (kvc_batch::stream) where it has one, and waits with
 * synchronize only where host memory must be read or released. A NULL stream means "ordered
 * after every earlier call of this instance, on any stream", as the 1.0 entries are.
 */
typedef struct kvc_backend_vtable {
  uint32_t struct_size;  /**< sizeof(kvc_backend_vtable) the plugin was built with */
  /** Creates an instance for one cache in @p *out_instance. */
  int32_t (*create)(const kvc_host_api *host, void **out_instance, kvc_plugin_error *error);
  /** Destroys an instance; every allocation has been freed before. */
  void (*destroy)(void *instance);
  /** Device memory; NULL when exhausted. Alignment is at least 64 bytes. */
  void *(*alloc)(void *instance, size_t bytes);
  /** Releases device memory from alloc. */
  void (*free)(void *instance, void *ptr);
  /** Copies @p bytes between host and device memory as @p kind says; returns when done. */
  int32_t (*copy)(void *instance, void *dst, const void *src, size_t bytes, kvc_copy_kind kind,
                  kvc_plugin_error *error);
  /** Runs every job of the call. */
  int32_t (*append)(void *instance, const kvc_append_call *call, kvc_plugin_error *error);
  /** Runs every job of the call. */
  int32_t (*attend)(void *instance, const kvc_attend_call *call, kvc_plugin_error *error);
  /** Runs every job of the call. */
  int32_t (*compact)(void *instance, const kvc_compact_call *call, kvc_plugin_error *error);
  /** Runs every job of the call. */
  int32_t (*read_keys)(void *instance, const kvc_read_keys_call *call, kvc_plugin_error *error);
  /** (1.1, optional) Runs every job of the call. NULL: the host reads through copy, one call
   * per segment and statistic. */
  int32_t (*read_tokens)(void *instance, const kvc_read_tokens_call *call,
                         kvc_plugin_error *error);
  /** (1.3, optional) Creates an instance for the cache @p config describes; the host calls it
   * instead of create when it is set. A backend that cannot serve the configuration (a
   * format, a head_dim, a device, a parameter) fails with KVC_ERR_UNSUPPORTED, and unknown
   * or bad `params` with KVC_ERR_CONFIG, with a message naming what it lacks; a device that
   * is absent is KVC_ERR_NO_DEVICE. Reads only the fields inside config->struct_size. */
  int32_t (*create_with_config)(const kvc_host_api *host, const kvc_backend_config *config,
                                void **out_instance, kvc_plugin_error *error);
  /** (1.3, optional) Queues a copy of @p bytes on @p stream, after the work queued on it
   * before; may return before it is done. Host memory on either side stays valid and
   * untouched until synchronize(@p stream) returns. */
  int32_t (*copy_async)(void *instance, void *dst, const void *src, size_t bytes,
                        kvc_copy_kind kind, void *stream, kvc_plugin_error *error);
  /** (1.3, optional) Releases device memory from alloc once the work queued on @p stream
   * before has finished: the backend may hand it out again only after that. */
  void (*free_async)(void *instance, void *ptr, void *stream);
  /** (1.3, optional) Returns when the work queued on @p stream (NULL: all of this instance's
   * work) is done. */
  int32_t (*synchronize)(void *instance, void *stream, kvc_plugin_error *error);
  /** (1.4, optional) Runs the append the call describes; the host calls it instead of append
   * when it is set. NULL: the host sends append one ::kvc_append_job per slot. */
  int32_t (*append_tensors)(void *instance, const kvc_append_tensors_call *call,
                            kvc_plugin_error *error);
  /** (1.6, optional) Runs every job of the call. A backend that has it also reads segments
   * with own formats (kvc_segment::own_formats) in attend, compact, read_keys and
   * read_tokens; NULL: the host never demotes rows on this backend (a cache that asks to
   * demote is refused with KVC_ERR_UNSUPPORTED). */
  int32_t (*convert)(void *instance, const kvc_convert_call *call, kvc_plugin_error *error);
} kvc_backend_vtable;

/* --------------------------------------------------------------- policies */

/**
 * @brief Per-token statistics a policy may ask for. Attention statistics are computed by the
 * backend's attention in the same pass, per (sequence, layer, KV head), over the softmax
 * probabilities p(g, i, j) of query head g of the KV head's group, query i, key j:
 */
typedef enum kvc_stat_flags {
  /** Sum over every query ever attended and over the group's heads of p (H2O). Kept across
   * calls; a new token starts at 0. */
  KVC_STAT_ATTN_SUM = 1u << 0,
  /** Mean over the group's heads of p for the last query of the latest attend (TOVA). */
  KVC_STAT_ATTN_LAST = 1u << 1,
  /** Sum over the last W queries of the latest attend and the group's heads of p, W being
   * the policy's observation window (SnapKV). */
  KVC_STAT_ATTN_WINDOW = 1u << 2,
  /** The keys themselves, as f32 rows (K-norm, KeyDiff). Read at compression time. A cache
   * that rotates K (kvc_cache_params::k_rotation) gives the rotated rows, whose norms and dot
   * products are the engine's keys'. */
  KVC_STAT_KEYS = 1u << 3
} kvc_stat_flags;

/** @brief A policy parameter from YAML (`policy.params`), as written. */
typedef kvc_key_value kvc_policy_param;

/** @brief What a policy needs from the host. */
typedef struct kvc_policy_needs {
  uint32_t struct_size;        /**< sizeof(kvc_policy_needs) of the host */
  uint32_t stats;              /**< a mask of ::kvc_stat_flags */
  int32_t observation_window;  /**< W for KVC_STAT_ATTN_WINDOW */
  /** NULL: the policy scores tokens itself. Otherwise the name of another policy plugin
   * whose scores it uses (created with the same parameters, minus `scorer`); this policy
   * then only sets budgets (Ada-KV, PyramidKV). The string lives as long as the instance. */
  const char *scorer;
  int32_t default_sinks;       /**< sinks kept when the configuration sets none */
  int32_t default_recent;      /**< recent tokens kept when the configuration sets none */
  /** With `scorer`: the parameters the scorer is created with (NULL: this policy's own
   * parameters minus `scorer`). Valid as long as the instance. */
  const kvc_policy_param *scorer_params;
  size_t n_scorer_params;      /**< entries in scorer_params */
} kvc_policy_needs;

/** @brief The stored tokens of one (sequence, layer, KV head) for a policy to score. Arrays
 * are host memory, [n_tokens] in storage (= position) order, valid during the call only. */
typedef struct kvc_score_job {
  uint32_t struct_size;        /**< sizeof(kvc_score_job) of the host */
  int32_t seq_id;              /**< the sequence */
  int32_t layer;               /**< the layer, 0-based */
  int32_t kv_head;             /**< the KV head, 0-based */
  int32_t n_tokens;            /**< stored tokens */
  const int32_t *pos;          /**< [n_tokens] absolute positions */
  const float *attn_sum;       /**< NULL unless asked for */
  const float *attn_last;      /**< NULL unless asked for */
  const float *attn_window;    /**< NULL unless asked for */
  const float *keys;           /**< [n_tokens, head_dim] f32, NULL unless asked for */
  int32_t head_dim;            /**< elements per key row */
  int32_t budget;              /**< tokens this head will keep (the configured budget) */
  int32_t sinks;               /**< configured sinks (see sink_end for what is kept) */
  int32_t recent;              /**< configured recent tokens (see recent_begin) */
  float *scores;               /**< [n_tokens], written by score(): higher is kept first */
  /** (1.1) Tokens [0, sink_end) and [recent_begin, n_tokens) are kept whatever their score:
   * the host's protected range, sink_end <= recent_begin <= n_tokens. */
  int32_t sink_end;
  int32_t recent_begin;        /**< (1.1) see sink_end */
} kvc_score_job;

/** @brief One (sequence, layer) whose per-head budgets a policy may set. */
typedef struct kvc_budget_request {
  uint32_t struct_size;         /**< sizeof(kvc_budget_request) of the host */
  int32_t layer;                /**< the layer, 0-based */
  int32_t n_layers;             /**< layers of the cache */
  int32_t n_heads;              /**< KV heads; jobs and budgets have this many entries */
  const int32_t *configured;    /**< [n_heads] the configured budget of each head, tokens */
  const kvc_score_job *jobs;    /**< [n_heads] with scores filled in, strided by struct_size */
} kvc_budget_request;

/**
 * @brief An eviction policy. The host keeps, per (sequence, layer, KV head), the `sinks`
 * first and `recent` last tokens and then the highest-scored tokens up to the head's budget,
 * in position order. Functions returning int32_t return a ::kvc_status_code.
 */
typedef struct kvc_policy_vtable {
  uint32_t struct_size;  /**< sizeof(kvc_policy_vtable) the plugin was built with */
  /** Parses parameters; unknown keys and bad values are KVC_ERR_CONFIG naming the key. */
  int32_t (*create)(const kvc_host_api *host, const kvc_policy_param *params, size_t n_params,
                    void **out_instance, kvc_plugin_error *error);
  /** Destroys an instance. */
  void (*destroy)(void *instance);
  /** Fills @p out_needs: only the fields inside its struct_size (set by the host). Sinks,
   * recent and window defaults are reported by the policy that scores; a policy wrapping a
   * scorer gets its scorer's. */
  void (*needs)(void *instance, kvc_policy_needs *out_needs);
  /** Scores the jobs (strided by struct_size): all KV heads of one (sequence, layer), one job
   * per head. NULL for a policy that only sets budgets. May be called concurrently for
   * different sequences. */
  int32_t (*score)(void *instance, const kvc_score_job *jobs, size_t n_jobs,
                   kvc_plugin_error *error);
  /** Optional: writes the budget of each head to budgets[h]. NULL: the configured ones. */
  int32_t (*budgets)(void *instance, const kvc_budget_request *request, int32_t *budgets,
                     kvc_plugin_error *error);
} kvc_policy_vtable;

/* ----------------------------------------------------------------- stores */
/** @brief A store parameter from YAML (`stores.<name>.params`), as written. */
typedef kvc_key_value kvc_store_param;
/**
 * @brief Called by kvc_store_vtable::get once it knows a value's size: returns @p size bytes
 * of host memory for the value (valid until get returns), or NULL when they cannot be had;
 * get then fails with KVC_ERR_OUT_OF_MEMORY. Called at most once per get. The memory is not
 * cleared first: a get that succeeds has written all @p size bytes.
 */
typedef void *(*kvc_store_reserve_fn)(void *user_data, size_t size);
/**
 * @brief (1.2) A store of byte values under string keys: an offload or sharing tier. Keys
 * are NUL-terminated UTF-8 of at most 1024 bytes; values are opaque bytes, returned exactly as
 * written. Every function may be called from several threads at once. Functions returning
 * int32_t return a ::kvc_status_code, with a message in the ::kvc_plugin_error:
 * KVC_ERR_NOT_FOUND for a key without a value; KVC_ERR_IO when the store cannot be reached,
 * times out, reports an error, or holds a value that fails its checksum or is incomplete;
 * KVC_ERR_OUT_OF_MEMORY when the store is full; KVC_ERR_CONFIG for bad parameters or refused
 * credentials. Every entry is required.
 */
typedef struct kvc_store_vtable {
  uint32_t struct_size;  /**< sizeof(kvc_store_vtable) the plugin was built with */
  /** Parses parameters (unknown keys and bad values are KVC_ERR_CONFIG naming the key) and
   * creates an instance. Should not fail because a server is unreachable now: connect on use. */
  int32_t (*create)(const kvc_host_api *host, const kvc_store_param *params, size_t n_params,
                    void **out_instance, kvc_plugin_error *error);
  /** Destroys an instance (the values stay where the store keeps them). */
  void (*destroy)(void *instance);
  /** Stores @p size bytes at @p data under @p key, replacing any value; returns KVC_OK only
   * once the value is whole in the store. A failed put leaves either the old value or none,
   * never a part of the new one that get would return. */
  int32_t (*put)(void *instance, const char *key, const void *data, size_t size,
                 kvc_plugin_error *error);
  /** Reads the value under @p key into memory from @p reserve (see ::kvc_store_reserve_fn). */
  int32_t (*get)(void *instance, const char *key, kvc_store_reserve_fn reserve,
                 void *reserve_data, kvc_plugin_error *error);
  /** Sets @p *out_exists to 1 when a value is under @p key, else 0. */
  int32_t (*exists)(void *instance, const char *key, int32_t *out_exists,
                    kvc_plugin_error *error);
  /** Deletes the value under @p key; KVC_ERR_NOT_FOUND when there is none. */
  int32_t (*remove)(void *instance, const char *key, kvc_plugin_error *error);
} kvc_store_vtable;

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_KVCACHE_PLUGIN_H */
