/**
 * @file kvcache.h
 * @brief The kvcache C API: a budgeted key/value cache for transformer inference.
 *
 * Conventions (they hold for every call in this header):
 * - Every fallible call returns a ::kvc_status pointer; NULL means success. A non-NULL status
 *   is owned by the caller and released with kvc_status_free().
 * - On error, out-parameters and the cache are left exactly as they were.
 * - Destroy functions return void and accept NULL.
 * - Strings passed in are UTF-8 and copied on entry; strings returned are owned by the object
 *   that returned them and live as long as it does, unless stated otherwise.
 * - Parameter and info structs start with `uint32_t struct_size`, which the caller sets to
 *   `sizeof` the struct it was compiled against (the `*_init` functions do this). The library
 *   treats fields beyond a smaller struct_size as zero/default, so old callers keep working.
 *
 * Thread safety:
 * - ::kvc_context: thread-safe, every call may be made from any thread concurrently.
 * - ::kvc_cache: calls that name disjoint sequences may run concurrently; calls that create
 *   or remove sequences, and kvc_cache_destroy(), need exclusive access. Batch calls
 *   parallelise internally on the context's thread arena.
 * - ::kvc_status: owned by one thread at a time.
 *
 * Lifetime: a cache must be destroyed before the context it was created from.
 */
#ifndef KVCACHE_KVCACHE_H
#define KVCACHE_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/kvcache_export.h"
#include "kvcache/kvcache_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

/** @brief Runtime version as MAJOR*10000 + MINOR*100 + PATCH; compare with ::KVC_VERSION_NUMBER. */
KVC_API uint32_t kvc_version(void);
/** @brief Runtime version as "MAJOR.MINOR.PATCH"; static storage. */
KVC_API const char *kvc_version_string(void);

/* ----------------------------------------------------------------- status */

/** @brief What went wrong. Values are stable across versions. */
typedef enum kvc_status_code {
  KVC_OK = 0,
  KVC_ERR_INVALID_ARGUMENT = 1, /**< a NULL handle, a bad shape, an id that is out of range */
  KVC_ERR_OUT_OF_MEMORY = 2,    /**< the cache's memory limit (or the device) is exhausted */
  KVC_ERR_NOT_FOUND = 3,        /**< unknown sequence, plugin, file */
  KVC_ERR_ALREADY_EXISTS = 4,   /**< a sequence id that is already in use */
  KVC_ERR_CONFIG = 5,           /**< YAML that is malformed or names a bad key or value */
  KVC_ERR_PLUGIN = 6,           /**< a plugin that cannot be loaded, or that reported an error */
  KVC_ERR_UNSUPPORTED = 7,      /**< a valid request this build or backend cannot serve */
  KVC_ERR_NO_DEVICE = 8,        /**< the backend's device is absent */
  KVC_ERR_INTERNAL = 9          /**< a bug in kvcache; please report it */
} kvc_status_code;

/** @brief An error: a code and a message. Opaque. */
typedef struct kvc_status kvc_status;

/** @brief The status's code; KVC_OK for NULL. */
KVC_API kvc_status_code kvc_status_get_code(const kvc_status *status);
/** @brief The status's UTF-8 message, owned by the status; "" for NULL. */
KVC_API const char *kvc_status_message(const kvc_status *status);
/** @brief Releases a status. Accepts NULL. */
KVC_API void kvc_status_free(kvc_status *status);
/** @brief A stable name for a code, such as "OUT_OF_MEMORY"; static storage. */
KVC_API const char *kvc_status_code_name(kvc_status_code code);

/* ---------------------------------------------------------------- context */

/** @brief Plugins, configuration, thread arena and logger. Opaque; thread-safe. */
typedef struct kvc_context kvc_context;

/** @brief Severity of a log message. */
typedef enum kvc_log_level {
  KVC_LOG_DEBUG = 0,
  KVC_LOG_INFO = 1,
  KVC_LOG_WARN = 2,
  KVC_LOG_ERROR = 3,
  KVC_LOG_OFF = 4
} kvc_log_level;

/**
 * @brief Receives log messages. May be called from any thread, concurrently; the message
 * is valid only during the call.
 */
typedef void (*kvc_log_fn)(void *user_data, kvc_log_level level, const char *message);

/**
 * @brief Creates a context from YAML text (see docs/config.md); NULL or "" means defaults.
 *
 * The context loads every plugin found in the default plugin folder (next to the library:
 * `<libdir>/kvcache/plugins`), in the folders of the `KVC_PLUGIN_PATH` environment variable
 * (separated by ':') and in the YAML's `plugins.paths`. A plugin in those folders that fails
 * to load is skipped with a warning in the log; kvc_context_load_plugin() reports errors.
 * The YAML's `cache`, `backend` and `policy` sections are kept for kvc_cache_create_from_yaml().
 */
KVC_API kvc_status *kvc_context_create(const char *yaml_text, kvc_context **out_context);
/** @brief As kvc_context_create(), reading the YAML from a file. */
KVC_API kvc_status *kvc_context_create_from_file(const char *path, kvc_context **out_context);
/** @brief Destroys a context and unloads its plugins. Accepts NULL. No cache may remain. */
KVC_API void kvc_context_destroy(kvc_context *context);

/**
 * @brief Routes log messages at or above @p min_level to @p fn; NULL restores the default
 * (warnings and errors to stderr). @p user_data is passed back unchanged.
 */
KVC_API void kvc_context_set_logger(kvc_context *context, kvc_log_fn fn, void *user_data,
                                    kvc_log_level min_level);

/**
 * @brief Loads the plugins exported by the shared library at @p path. Errors name the file:
 * a missing file, a missing `kvc_plugin_entry` symbol, a different plugin ABI major or a
 * descriptor larger than this library knows. A library stays loaded until the context dies.
 * Loading a plugin whose (kind, name) is already registered is an ALREADY_EXISTS error.
 */
KVC_API kvc_status *kvc_context_load_plugin(kvc_context *context, const char *path);

/** @brief Kinds of plugin. */
typedef enum kvc_plugin_kind { KVC_PLUGIN_POLICY = 1, KVC_PLUGIN_BACKEND = 2 } kvc_plugin_kind;

/** @brief Describes a loaded plugin; strings are owned by the context. */
typedef struct kvc_plugin_info {
  uint32_t struct_size; /**< set by the caller to sizeof(kvc_plugin_info) */
  kvc_plugin_kind kind; /**< policy or backend */
  const char *name;    /**< the name used in YAML, such as "cpu" or "snapkv" */
  uint32_t version;    /**< the plugin's own version */
  const char *path;    /**< the shared library it came from */
} kvc_plugin_info;

/** @brief Number of loaded plugins. */
KVC_API size_t kvc_context_plugin_count(const kvc_context *context);
/** @brief Describes plugin @p index (0 .. count-1). */
KVC_API kvc_status *kvc_context_plugin_info(const kvc_context *context, size_t index,
                                            kvc_plugin_info *out_info);

/* ------------------------------------------------------------------ cache */

/** @brief One model shape's K/V store with its memory limit and backend. Opaque. */
typedef struct kvc_cache kvc_cache;

/** @brief Element types of stored and passed tensors. */
typedef enum kvc_dtype { KVC_DTYPE_F32 = 0, KVC_DTYPE_F16 = 1, KVC_DTYPE_BF16 = 2 } kvc_dtype;

/** @brief Storage layouts; both are read by the same kernels as a list of segments. */
typedef enum kvc_layout {
  KVC_LAYOUT_PAGED = 0,      /**< fixed blocks of block_tokens; growth never copies */
  KVC_LAYOUT_CONTIGUOUS = 1  /**< one segment per (seq, layer, head), grown by growth_factor */
} kvc_layout;

/** @brief A key and its value, both UTF-8 strings. */
typedef struct kvc_key_value {
  const char *key;   /**< the parameter's name */
  const char *value; /**< its value as written in YAML, e.g. "32" or "max" */
} kvc_key_value;

/** @brief When a cache compresses a prompt automatically. */
typedef enum kvc_prefill_compression {
  KVC_PREFILL_NONE = 0,      /**< never during prefill */
  KVC_PREFILL_PER_CHUNK = 1, /**< after the attention of every prompt chunk (Batch-Max) */
  KVC_PREFILL_ONCE = 2       /**< once, when the first decode token of a sequence arrives */
} kvc_prefill_compression;

/** @brief Shape and storage of a cache. Fill with kvc_cache_params_init() first. */
typedef struct kvc_cache_params {
  uint32_t struct_size;  /**< sizeof(kvc_cache_params), set by kvc_cache_params_init() */
  int32_t layers;        /**< default 1 */
  int32_t kv_heads;      /**< default 1 */
  int32_t q_heads;       /**< a multiple of kv_heads (GQA); default 1 */
  int32_t head_dim;      /**< default 64 */
  kvc_dtype dtype;       /**< storage dtype; default f16 */
  kvc_layout layout;     /**< default paged */
  int32_t block_tokens;  /**< paged: tokens per block; default 16 */
  double growth_factor;  /**< contiguous: capacity multiplier when full (> 1); default 2 */
  size_t memory_limit;   /**< bytes of K, V and per-token metadata; default 1 GiB */
  const char *backend;   /**< backend plugin name; NULL means "cpu" */
  /* Compression (docs/policies.md); all strings are copied. */
  const char *policy;    /**< eviction policy plugin name; NULL: the cache never compresses */
  int32_t budget;        /**< tokens kept per (sequence, layer, KV head); 0: use budget_ratio */
  double budget_ratio;   /**< in (0, 1]: budget as a share of the tokens a head has received */
  int32_t sinks;         /**< first tokens always kept; < 0: the policy's default (default -1) */
  int32_t recent;        /**< newest tokens always kept; < 0: the policy's default (default -1) */
  const kvc_key_value *policy_params; /**< policy-specific parameters, as in YAML */
  size_t n_policy_params;             /**< entries in policy_params */
  kvc_prefill_compression prefill;    /**< default KVC_PREFILL_NONE */
  int32_t decode_every;  /**< > 0: compress every this many single-token steps */
  int32_t decode_slack;  /**< > 0: compress when a head holds more than budget + slack */
} kvc_cache_params;

/** @brief Fills @p params with defaults and sets struct_size. */
KVC_API void kvc_cache_params_init(kvc_cache_params *params);

/** @brief Creates a cache. The context must outlive it. */
KVC_API kvc_status *kvc_cache_create(kvc_context *context, const kvc_cache_params *params,
                                     kvc_cache **out_cache);
/**
 * @brief Creates a cache from YAML text holding `cache:` and optionally `backend:` sections,
 * in the format of the context's configuration; NULL uses the context's own configuration.
 */
KVC_API kvc_status *kvc_cache_create_from_yaml(kvc_context *context, const char *yaml_text,
                                               kvc_cache **out_cache);
/** @brief Destroys a cache and frees all its memory. Accepts NULL. */
KVC_API void kvc_cache_destroy(kvc_cache *cache);

/** @brief Reads back the shape a cache was created with (defaults filled in). */
KVC_API kvc_status *kvc_cache_get_params(const kvc_cache *cache, kvc_cache_params *out_params);

/** @brief Memory and token counters of a cache. */
typedef struct kvc_cache_stats {
  uint32_t struct_size;    /**< set by the caller to sizeof(kvc_cache_stats) */
  size_t bytes_used;       /**< bytes held by stored tokens (blocks or segment capacity) */
  size_t bytes_peak;       /**< highest bytes_used since creation */
  size_t bytes_limit;      /**< the memory limit */
  size_t bytes_reserved;   /**< bytes taken from the backend, including pooled free blocks */
  uint64_t tokens_stored;  /**< tokens stored, summed over (sequence, layer, KV head) */
  uint64_t tokens_evicted; /**< tokens removed by compression, summed likewise */
  uint64_t bytes_copied;   /**< bytes moved by growth of contiguous segments */
  size_t blocks_used;      /**< paged: blocks holding tokens */
  size_t blocks_free;      /**< paged: blocks that still fit under the limit */
  int32_t sequences;       /**< live sequences */
} kvc_cache_stats;

/** @brief Fills @p out_stats; set out_stats->struct_size first. */
KVC_API kvc_status *kvc_cache_get_stats(const kvc_cache *cache, kvc_cache_stats *out_stats);

/* -------------------------------------------------------------- sequences */

/** @brief Creates an empty sequence. Ids are chosen by the caller and must be >= 0. */
KVC_API kvc_status *kvc_seq_create(kvc_cache *cache, int32_t seq_id);
/** @brief Removes a sequence and returns its memory to the pool. */
KVC_API kvc_status *kvc_seq_remove(kvc_cache *cache, int32_t seq_id);
/**
 * @brief Ensures every (layer, KV head) of the sequence can hold @p tokens tokens without
 * allocating; fails with OUT_OF_MEMORY and changes nothing when that passes the limit.
 */
KVC_API kvc_status *kvc_seq_reserve(kvc_cache *cache, int32_t seq_id, int32_t tokens);
/** @brief Number of tokens stored for (sequence, layer, KV head). */
KVC_API kvc_status *kvc_seq_length(const kvc_cache *cache, int32_t seq_id, int32_t layer,
                                   int32_t kv_head, int32_t *out_length);

/** @brief A run of stored tokens, as seen by an engine with its own attention kernels. */
typedef struct kvc_segment_view {
  const void *k;       /**< [count, head_dim] of the storage dtype, in the backend's memory */
  const void *v;       /**< [count, head_dim] of the storage dtype, in the backend's memory */
  const int32_t *pos;  /**< [count] absolute positions, in the backend's memory */
  int32_t count;       /**< tokens in this segment */
} kvc_segment_view;

/**
 * @brief Views the stored tokens of (sequence, layer, KV head) as segments in storage
 * (= position) order. Writes at most @p capacity views to @p out_views and the number of
 * segments to @p out_count (call with capacity 0 to size the array). The pointers stay valid
 * until the next call that appends to, compresses or removes this sequence.
 */
KVC_API kvc_status *kvc_seq_view(const kvc_cache *cache, int32_t seq_id, int32_t layer,
                                 int32_t kv_head, kvc_segment_view *out_views, size_t capacity,
                                 size_t *out_count);

/* -------------------------------------------------------------- data path */

/** @brief Where a tensor's memory lives. */
typedef enum kvc_device {
  KVC_DEVICE_HOST = 0,   /**< ordinary host memory */
  KVC_DEVICE_BACKEND = 1 /**< the backend's device memory (same as host for the CPU backend) */
} kvc_device;

/**
 * @brief A read-only row-major tensor `[tokens, heads, head_dim]`: element (t, h, i) is at
 * `data + (t * row_stride + h * head_dim + i) * sizeof(dtype)`.
 */
typedef struct kvc_tensor {
  const void *data;    /**< the first element; read during the call only */
  kvc_dtype dtype;     /**< f32 or the cache's storage dtype */
  kvc_device device;   /**< where data lives */
  size_t row_stride;   /**< elements between consecutive tokens; 0 means heads * head_dim */
} kvc_tensor;

/** @brief A writable tensor, laid out as ::kvc_tensor. Attention output is f32. */
typedef struct kvc_tensor_mut {
  void *data;          /**< the first element; written during the call only */
  kvc_dtype dtype;     /**< f32 */
  kvc_device device;   /**< where data lives */
  size_t row_stride;   /**< elements between consecutive tokens; 0 means heads * head_dim */
} kvc_tensor_mut;

/**
 * @brief A batch of sequences on one layer. The new tokens of all sequences are
 * concatenated in the order of seq_ids: sequence i contributes n_tokens[i] rows
 * (a prefill chunk, or 1 when decoding) whose absolute positions are given in `positions`
 * (total = sum of n_tokens entries). Arrays are read during the call only.
 */
typedef struct kvc_batch {
  uint32_t struct_size;      /**< sizeof(kvc_batch), set by kvc_batch_init() */
  int32_t n_seqs;            /**< sequences in the batch, >= 1 */
  const int32_t *seq_ids;    /**< [n_seqs] distinct sequence ids */
  const int32_t *n_tokens;   /**< [n_seqs] new tokens of each sequence, >= 1 */
  const int32_t *positions;  /**< [sum of n_tokens] absolute positions of the new tokens */
} kvc_batch;

/** @brief Fills @p batch with the given arrays and sets struct_size. */
KVC_API void kvc_batch_init(kvc_batch *batch, int32_t n_seqs, const int32_t *seq_ids,
                            const int32_t *n_tokens, const int32_t *positions);

/** @brief Attention options. Fill with kvc_attention_params_init() first. */
typedef struct kvc_attention_params {
  uint32_t struct_size;   /**< sizeof(kvc_attention_params), set by kvc_attention_params_init() */
  float scale;            /**< logit scale; 0 means 1/sqrt(head_dim) */
  int32_t sliding_window; /**< > 0: a query at p sees keys at positions (p - window, p] */
  float softcap;          /**< > 0: logits become softcap * tanh(logit / softcap) */
} kvc_attention_params;

/** @brief Fills @p params with defaults (scale 1/sqrt(d), no window, no soft-cap). */
KVC_API void kvc_attention_params_init(kvc_attention_params *params);

/**
 * @brief Stores the new tokens' K and V (`[total, kv_heads, head_dim]`) of layer @p layer.
 * All-or-nothing: if storing every token would pass the memory limit the call returns
 * OUT_OF_MEMORY and nothing is stored.
 */
KVC_API kvc_status *kvc_append(kvc_cache *cache, int32_t layer, const kvc_batch *batch,
                               const kvc_tensor *k, const kvc_tensor *v);

/**
 * @brief Attention of the new tokens' queries `q` (`[total, q_heads, head_dim]`) over what
 * the cache holds for each sequence on @p layer, causal by position (a query at position p
 * sees stored keys at positions <= p), with grouped-query heads. Writes `out`
 * (`[total, q_heads, head_dim]`, f32). Call kvc_append() for the new tokens first, or use
 * kvc_append_attend(). A query that sees no key gets zeros.
 */
KVC_API kvc_status *kvc_attend(kvc_cache *cache, int32_t layer, const kvc_batch *batch,
                               const kvc_tensor *q, const kvc_attention_params *params,
                               kvc_tensor_mut *out);

/** @brief kvc_append() then kvc_attend() in one call; on error nothing is stored. */
KVC_API kvc_status *kvc_append_attend(kvc_cache *cache, int32_t layer, const kvc_batch *batch,
                                      const kvc_tensor *q, const kvc_tensor *k,
                                      const kvc_tensor *v, const kvc_attention_params *params,
                                      kvc_tensor_mut *out);

/* ------------------------------------------------------------ compression */

/**
 * @brief Compresses sequences now: for each listed sequence, on layer @p layer (or every
 * layer when it is -1), every (layer, KV head) holding more than its budget keeps its sinks,
 * its recent tokens and its best-scored tokens up to the budget; freed blocks return to the
 * pool. A cache without a policy does nothing. If the policy reports an error, the cache is
 * unchanged.
 */
KVC_API kvc_status *kvc_compress(kvc_cache *cache, int32_t layer, int32_t n_seqs,
                                 const int32_t *seq_ids);

/** @brief Attention statistics an engine computed itself (see kvcache_plugin.h). */
typedef enum kvc_stat_kind {
  KVC_STAT_KIND_ATTN_SUM = 1,   /**< added to the accumulated attention mass (H2O) */
  KVC_STAT_KIND_ATTN_LAST = 2,  /**< replaces the last query's attention (TOVA) */
  KVC_STAT_KIND_ATTN_WINDOW = 4 /**< replaces the observation window's attention (SnapKV) */
} kvc_stat_kind;

/**
 * @brief Reports statistics of one (sequence, layer, KV head) for engines that compute
 * attention with their own kernels: @p values holds one float per stored token, in storage
 * order (kvc_seq_length() of them), defined over the query heads of the group as the
 * matching ::kvc_stat_flags entry of kvcache_plugin.h says (sums, or the mean for the last
 * query's attention). Fails with
 * INVALID_ARGUMENT when the cache's policy does not use that statistic.
 */
KVC_API kvc_status *kvc_report_stats(kvc_cache *cache, int32_t seq_id, int32_t layer,
                                     int32_t kv_head, kvc_stat_kind kind, const float *values,
                                     int32_t n_values);

/**
 * @brief Peak bytes one sequence holds, over all layers and KV heads, when its prompt of
 * @p prompt_tokens arrives in chunks of @p chunk_tokens and @p new_tokens are then decoded
 * one at a time, under the cache's layout, policy, budget and triggers. An engine divides
 * the memory limit by it to size its batch.
 */
KVC_API kvc_status *kvc_cache_estimate_peak_bytes(const kvc_cache *cache, int32_t prompt_tokens,
                                                  int32_t chunk_tokens, int32_t new_tokens,
                                                  size_t *out_bytes);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_KVCACHE_H */
