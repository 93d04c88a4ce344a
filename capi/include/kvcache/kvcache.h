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
 *   A larger struct_size (a caller built against a newer kvcache) is read when the bytes past
 *   the fields this library knows are zero, and refused with KVC_ERR_UNSUPPORTED otherwise;
 *   an out-struct is written no further than the fields both sides know.
 * - The ABI only grows (docs/guarantees.md, "Stable ABI"). Each `kvc_X_init(x, ...)` is a macro
 *   calling the exported `kvc_X_init_sized(x, sizeof(kvc_X), ...)`, so the caller's size travels
 *   with the call: it fills the fields that fit in `struct_size` bytes, zeroes the bytes past
 *   the fields this library knows and sets struct_size. NULL, or a size below the struct's
 *   oldest layout or above UINT32_MAX, writes nothing. The exported `kvc_X_init` symbols stay
 *   for binaries built against older headers (and for bindings that call them by name): they
 *   write the oldest layout that struct ever had with an `_init` (kvc_batch: 32 bytes, without
 *   stream and prompt_end; kvc_cache_stats: 88 bytes, without bytes_shared; the others as
 *   today), since such a caller cannot say which header it was built against: a binary built
 *   between the first release and the `_sized` functions that sets stream or prompt_end after
 *   kvc_batch_init() has them ignored until it is rebuilt. Bindings call the `_sized`
 *   functions with their own struct's size.
 *
 * Thread safety:
 * - ::kvc_context: thread-safe, every call may be made from any thread concurrently.
 * - ::kvc_cache: every call but kvc_cache_destroy() may be made from any thread concurrently,
 *   on the same sequences or on others. Calls that name a sequence take its lock, a batch's in
 *   ascending id order, and run one after another on it as if called in some order; calls on
 *   disjoint sequences run side by side. A call that creates or removes a sequence (create,
 *   remove, fork, import, restore, prefix load, and the removal of an offload) has the
 *   sequence table to itself for a moment and waits for the calls running; a sequence removed
 *   meanwhile is NOT_FOUND to the calls after it. kvc_cache_destroy() and
 *   kvc_cache_set_stream() need exclusive access.
 *   A callback (logger, policy, backend, store) must not call the cache it is called from.
 *   Batch calls parallelise internally on the context's thread arena.
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
  KVC_ERR_INTERNAL = 9,         /**< a bug in kvcache; please report it */
  KVC_ERR_IO = 10               /**< a file could not be read or written */
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
/** @brief As kvc_context_create(), reading the YAML from a file: NOT_FOUND when @p path does
 * not exist, IO when it is a folder or cannot be read, the message naming it. */
KVC_API kvc_status *kvc_context_create_from_file(const char *path, kvc_context **out_context);
/** @brief Destroys a context and unloads its plugins. Accepts NULL. No cache may remain. */
KVC_API void kvc_context_destroy(kvc_context *context);

/**
 * @brief Routes log messages at or above @p min_level to @p fn; NULL restores the default
 * (warnings and errors to stderr). @p user_data is passed back unchanged. A @p min_level that
 * is not a ::kvc_log_level leaves the logger as it was and logs a warning to it. Returns once no
 * other thread is inside the previous callback, so its @p user_data may then be freed. A
 * callback may call it (and log); the library holds no lock of its own while calling one.
 */
KVC_API void kvc_context_set_logger(kvc_context *context, kvc_log_fn fn, void *user_data,
                                    kvc_log_level min_level);

/**
 * @brief Loads the plugins exported by the shared library at @p path. Errors name the file:
 * a missing file, a folder (IO), a missing `kvc_plugin_entry` symbol, a different plugin ABI
 * major or a descriptor larger than this library knows. A library stays loaded until the
 * context dies.
 * Loading a plugin whose (kind, name) is already registered is an ALREADY_EXISTS error.
 */
KVC_API kvc_status *kvc_context_load_plugin(kvc_context *context, const char *path);

/** @brief Kinds of plugin. */
typedef enum kvc_plugin_kind {
  KVC_PLUGIN_POLICY = 1,
  KVC_PLUGIN_BACKEND = 2,
  KVC_PLUGIN_STORE = 3 /**< offload and sharing tiers (plugin ABI 1.2): host, disk, redis */
} kvc_plugin_kind;

/** @brief Describes a loaded plugin; strings are owned by the context. */
typedef struct kvc_plugin_info {
  uint32_t struct_size; /**< set by the caller to sizeof(kvc_plugin_info) */
  kvc_plugin_kind kind; /**< policy, backend or store */
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

/**
 * @brief Storage formats of K and V rows, and element types of passed tensors. Each format's
 * layout (group size, bytes per row) is in the table of kvcache/kvcache_format.h.
 */
typedef enum kvc_dtype {
  KVC_DTYPE_F32 = 0,
  KVC_DTYPE_F16 = 1,
  KVC_DTYPE_BF16 = 2,
  KVC_DTYPE_Q8_0 = 3, /**< storage only: groups of 32 int8 values with an f16 scale */
  KVC_DTYPE_Q4_0 = 4  /**< storage only: groups of 32 4-bit values with an f16 scale */
} kvc_dtype;

/**
 * @brief Bytes per element of @p dtype, a format without scales (kvc_format_row_bytes() of
 * one value); 0 for a format with scales or a value that is not a ::kvc_dtype.
 */
KVC_API size_t kvc_dtype_size(kvc_dtype dtype);
/**
 * @brief The name of @p dtype as written in YAML ("f32", "f16", "bf16"), or "unknown" for a
 * value that is not a ::kvc_dtype; static storage.
 */
KVC_API const char *kvc_dtype_name(kvc_dtype dtype);

/** @brief One format of the table, as kvc_format_describe() reports it. */
typedef struct kvc_format_info {
  uint32_t struct_size;  /**< set by the caller to sizeof(kvc_format_info) */
  kvc_dtype format;      /**< the format described */
  const char *name;      /**< as in YAML; static storage */
  uint32_t group_size;   /**< values sharing one scale; 1: no scales */
  uint32_t group_bytes;  /**< bytes of one group, its scale included */
} kvc_format_info;

/**
 * @brief Describes @p format from the table of kvcache/kvcache_format.h, for callers that
 * cannot use that header's inline functions (language wrappers). INVALID_ARGUMENT for a value
 * outside the table or a NULL @p out_info. Thread-safe.
 */
KVC_API kvc_status *kvc_format_describe(kvc_dtype format, kvc_format_info *out_info);

/** @brief Storage layouts; both are read by the same kernels as a list of segments. */
typedef enum kvc_layout {
  KVC_LAYOUT_PAGED = 0,      /**< fixed blocks of block_tokens; growth never copies */
  KVC_LAYOUT_CONTIGUOUS = 1  /**< one segment per (seq, layer, head), grown by growth_factor */
} kvc_layout;

/**
 * @brief Rotations a cache may apply to K (kvc_cache_params::k_rotation); the transform is
 * kvc_rotation_apply() of kvcache_rotation.h.
 */
typedef enum kvc_rotation {
  KVC_ROTATION_NONE = 0,    /**< keys are stored as the engine passes them */
  /** Each K row, before it is stored (and quantized), and each query row at attention pass
   * through a normalised Hadamard transform: logits are unchanged up to rounding, and outlier
   * channels are spread over the row, so 4-bit keys lose less. */
  KVC_ROTATION_HADAMARD = 1
} kvc_rotation;

/** @brief A key and its value, both UTF-8 strings. */
typedef struct kvc_key_value {
  const char *key;   /**< the parameter's name */
  const char *value; /**< its value as written in YAML, e.g. "32" or "max" */
} kvc_key_value;

/**
 * @brief When a cache compresses a prompt automatically.
 *
 * With KVC_PREFILL_ONCE, the store (kvc_append(), kvc_append_attend()) that brings a sequence's
 * first decode token to a layer compresses that layer first. Until it returns, that call has
 * the cache to itself (other calls wait) and holds a host copy of the layer's K/V of the
 * sequences it stores (outside memory_limit), so that a failure anywhere in it puts them back.
 */
typedef enum kvc_prefill_compression {
  KVC_PREFILL_NONE = 0,      /**< never during prefill */
  KVC_PREFILL_PER_CHUNK = 1, /**< after the attention of every prompt chunk (Batch-Max) */
  KVC_PREFILL_ONCE = 2       /**< once, when the first decode token of a sequence arrives */
} kvc_prefill_compression;

/**
 * @brief Shape and storage of a cache. Fill with kvc_cache_params_init() first.
 *
 * Bounds, checked by kvc_cache_create() and the YAML `cache:` section alike (INVALID_ARGUMENT
 * naming the field): layers 1..4096, kv_heads 1..4096 and layers x kv_heads at most 65536
 * (each (sequence, layer, KV head) has host bookkeeping outside memory_limit), q_heads at most
 * 16384, head_dim 1..1024, block_tokens 1..65536, growth_factor 1.01..16. A sequence holds at
 * most INT32_MAX tokens, so a budget is at most that too.
 */
typedef struct kvc_cache_params {
  uint32_t struct_size;  /**< sizeof(kvc_cache_params), set by kvc_cache_params_init() */
  int32_t layers;        /**< 1..4096; default 1 */
  int32_t kv_heads;      /**< 1..4096, layers x kv_heads <= 65536; default 1 */
  int32_t q_heads;       /**< a multiple of kv_heads (GQA); default 0: as many as kv_heads */
  int32_t head_dim;      /**< 1..1024; default 64 */
  kvc_dtype dtype;       /**< storage format of K and V (see k_dtype, v_dtype); default f16 */
  kvc_layout layout;     /**< default paged */
  int32_t block_tokens;  /**< paged: tokens per block; default 16 */
  double growth_factor;  /**< contiguous: capacity multiplier when full (1.01..16); default 2 */
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
  /** A ::kvc_dtype: the storage format of K, or -1 (the default): `dtype`.
   * kvc_cache_get_params() reports the format in use. A struct_size that ends before v_dtype
   * (an older caller's, whose tail padding k_dtype occupies) means -1 for both. */
  int32_t k_dtype;
  int32_t v_dtype;       /**< likewise for V */
  /** A ::kvc_rotation applied to K by the backend; default KVC_ROTATION_NONE. Keys read back
   * (kvc_seq_view(), kvc_seq_export(), the rows policies read) are the stored, rotated rows,
   * whose norms and dot products equal the engine's. A struct_size that ends before it means
   * none (it lies in the tail padding of the struct before it, which that struct's
   * kvc_cache_params_init() zeroes). */
  int32_t k_rotation;
  /** Nonzero: prefix caching (see "prefix cache" below; paged layout only). Default 0. */
  int32_t prefix_cache;
  /** With prefix_cache: a store (kvc_context's `stores:`) that kvc_prefix_attach() continues
   * in where the cache has no more blocks; NULL (the default): none. Copied. */
  const char *prefix_store;
  /** Nonzero, with prefix_store: kvc_prefix_publish() also writes the blocks it makes findable
   * to the store, under the same keys. Default 0. */
  int32_t prefix_write_through;
  /** With demotion (demote_k_dtype or demote_v_dtype set): the share of each head's byte
   * budget that tokens in the cache's own formats may take, the protected ones first; the
   * rest holds demoted tokens. In [0, 1]; default 0.25. */
  double demote_keep;
  /** A ::kvc_dtype: "demote before evict" (docs/policies.md). With a policy, a compression
   * stores the tokens the budget cannot keep in the cache's formats with K in this smaller
   * format, re-encoded from the stored rows, and evicts only what still does not fit; the
   * budget then counts bytes: that many tokens' bytes in the cache's formats. Paged layout
   * only, and a backend with the plugin ABI 1.6 convert entry. -1 (the default): K is not
   * demoted (it keeps k_dtype when only demote_v_dtype is set). */
  int32_t demote_k_dtype;
  int32_t demote_v_dtype; /**< likewise for V; both -1: no demotion */
} kvc_cache_params;

/** @brief Fills @p params with defaults and sets struct_size. */
KVC_API void kvc_cache_params_init_sized(kvc_cache_params *params, size_t struct_size);
/** @brief For binaries built against older headers: writes the oldest layout of
 * ::kvc_cache_params (see the conventions above). */
KVC_API void kvc_cache_params_init(kvc_cache_params *params);
/** @brief Fills the caller's struct: kvc_cache_params_init_sized() with its `sizeof`. */
#define kvc_cache_params_init(params) \
  kvc_cache_params_init_sized((params), sizeof(kvc_cache_params))

/** @brief Creates a cache. The context must outlive it. */
KVC_API kvc_status *kvc_cache_create(kvc_context *context, const kvc_cache_params *params,
                                     kvc_cache **out_cache);
/**
 * @brief Creates a cache from YAML text holding `cache:` and optionally `backend:` sections,
 * in the format of the context's configuration; NULL uses the context's own configuration.
 * `threads`, `plugins.paths` and `stores` may repeat the context's but not change them (CONFIG;
 * a plugin path that does not exist is NOT_FOUND): they are set by kvc_context_create().
 */
KVC_API kvc_status *kvc_cache_create_from_yaml(kvc_context *context, const char *yaml_text,
                                               kvc_cache **out_cache);
/** @brief Destroys a cache and frees all its memory. Accepts NULL. */
KVC_API void kvc_cache_destroy(kvc_cache *cache);

/** @brief Reads back the shape a cache was created with (defaults filled in). */
KVC_API kvc_status *kvc_cache_get_params(const kvc_cache *cache, kvc_cache_params *out_params);

/**
 * @brief Sets the backend stream or queue (for the CUDA backend a `cudaStream_t`) that the
 * cache orders its work on wherever a call names none: a batch whose kvc_batch::stream is NULL,
 * and every call that carries no stream (kvc_compress(), sequence operations such as
 * kvc_seq_fork() and kvc_seq_truncate(), exports, imports, offloads, the prefix cache, reads of
 * statistics). An engine that runs on a non-blocking stream sets it here, so that such a
 * call neither reads statistics before the attention that writes them has finished nor moves
 * rows an attention still reads. NULL (the default) is the backend's default stream. The CPU
 * backend ignores streams. The stream must stay valid while calls of the cache may use it;
 * kvc_cache_destroy() does not use it. Needs exclusive access to the cache, like
 * kvc_cache_destroy(). INVALID_ARGUMENT for a NULL cache.
 */
KVC_API kvc_status *kvc_cache_set_stream(kvc_cache *cache, void *stream);

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
  size_t blocks_free;      /**< paged: blocks that still fit under the limit, cached ones
                                counted as free (they are given back when needed) */
  int32_t sequences;       /**< live sequences */
  /** Of bytes_used, what more than one sequence holds (blocks shared by kvc_seq_fork and
   * kvc_prefix_attach). */
  size_t bytes_shared;
  /** Of bytes_used, blocks that only the prefix cache holds (no live sequence): given back, least
   * recently used first, as soon as a call needs the memory. */
  size_t bytes_cached;
  uint64_t bytes_reclaimed;      /**< bytes of cached blocks given back so far to make room */
  uint64_t prefix_hits;          /**< kvc_prefix_attach() calls that attached at least one block */
  uint64_t prefix_tokens_reused; /**< tokens those calls attached, summed */
  /** Tokens compression moved into a head's demoted tier (demote_k_dtype, demote_v_dtype),
   * summed over (sequence, layer, KV head). */
  uint64_t tokens_demoted;
} kvc_cache_stats;

/** @brief Zero-fills @p stats and sets struct_size, ready for kvc_cache_get_stats(). */
KVC_API void kvc_cache_stats_init_sized(kvc_cache_stats *stats, size_t struct_size);
/** @brief For binaries built against older headers: writes the oldest layout of
 * ::kvc_cache_stats (see the conventions above). */
KVC_API void kvc_cache_stats_init(kvc_cache_stats *stats);
/** @brief Fills the caller's struct: kvc_cache_stats_init_sized() with its `sizeof`. */
#define kvc_cache_stats_init(stats) \
  kvc_cache_stats_init_sized((stats), sizeof(kvc_cache_stats))
/** @brief Fills @p out_stats; set out_stats->struct_size first (kvc_cache_stats_init()). */
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
/**
 * @brief Creates sequence @p dst_seq_id as a fork of @p src_seq_id: it shares every stored
 * K/V block of the source by reference count and gets its own copy of the per-token
 * statistics and compression counters, so the branches then diverge independently. A shared
 * block counts once against the memory limit (kvc_cache_stats::bytes_shared) and is copied
 * before either branch writes it (an append into a shared partly filled block, a compaction
 * that moves its tokens). Costs O(blocks), plus one copy of the statistics. Fails with
 * ALREADY_EXISTS when @p dst_seq_id exists and OUT_OF_MEMORY when the statistics do not fit,
 * changing nothing. Waits for calls on other sequences of the cache to finish.
 */
KVC_API kvc_status *kvc_seq_fork(kvc_cache *cache, int32_t src_seq_id, int32_t dst_seq_id);
/**
 * @brief Drops every stored token at positions >= @p position on every layer and KV head
 * (rollback of rejected speculative tokens); emptied blocks go back to the pool. The tokens
 * are as if never appended (a ratio budget counts what is left).
 */
KVC_API kvc_status *kvc_seq_truncate(kvc_cache *cache, int32_t seq_id, int32_t position);
/**
 * @brief Drops the stored tokens at positions in [@p first, @p end) on every layer and KV
 * head (llama.cpp's `seq_rm`); the others keep their positions. May copy shared blocks first
 * (OUT_OF_MEMORY then changes nothing).
 */
KVC_API kvc_status *kvc_seq_remove_range(kvc_cache *cache, int32_t seq_id, int32_t first,
                                         int32_t end);
/**
 * @brief The size in bytes of kvc_seq_export()'s output for the sequence as it is now,
 * counted from its heads' lengths (nothing is copied).
 */
KVC_API kvc_status *kvc_seq_export_size(kvc_cache *cache, int32_t seq_id, size_t *out_size);
/**
 * @brief Writes everything stored for the sequence (per (layer, KV head) positions, K, V and
 * statistics, and its compression counters) into @p buffer in the versioned, checksummed,
 * little-endian format of docs/sequence_format.md; K as stored (rotated, with the rotation
 * recorded, when the cache rotates K: such bytes import only into a cache of the same
 * rotation); a head's demoted tier (demote_k_dtype, demote_v_dtype) in its own formats, with
 * the formats recorded: such bytes import only into a cache that demotes into the same
 * formats (UNSUPPORTED otherwise). Fails with INVALID_ARGUMENT, writing
 * nothing, when @p capacity is smaller than kvc_seq_export_size(); stores the bytes written
 * in @p out_written.
 */
KVC_API kvc_status *kvc_seq_export(kvc_cache *cache, int32_t seq_id, void *buffer,
                                   size_t capacity, size_t *out_written);
/**
 * @brief Creates sequence @p seq_id from bytes of kvc_seq_export(), from this or another
 * cache or process. The shape (layers, KV heads, query heads, head_dim) must match; storage
 * of another dtype is converted where that is exact (f16 or bf16 into an f32 cache) and
 * refused otherwise (UNSUPPORTED, saying why); the layout may differ. A cache whose policy
 * reads a statistic the bytes lack refuses them (UNSUPPORTED). Truncated, corrupted or
 * inconsistent bytes are INVALID_ARGUMENT naming what is wrong; the memory limit applies all
 * or nothing (OUT_OF_MEMORY). On any error no sequence is created. Waits for calls on other
 * sequences of the cache to finish. @p data is only read, during the call, and must not
 * change while the call runs: the rows are copied from it after its checksum was verified.
 */
KVC_API kvc_status *kvc_seq_import(kvc_cache *cache, int32_t seq_id, const void *data,
                                   size_t size);
/** @brief kvc_seq_export() into the file at @p path (UTF-8), replaced atomically: a failed
 * write (KVC_ERR_IO; a folder at @p path too) leaves any earlier file as it was. */
KVC_API kvc_status *kvc_seq_export_file(kvc_cache *cache, int32_t seq_id, const char *path);
/** @brief kvc_seq_import() from the file at @p path (NOT_FOUND when it does not exist, IO
 * when it is a folder or cannot be read). */
KVC_API kvc_status *kvc_seq_import_file(kvc_cache *cache, int32_t seq_id, const char *path);
/** @brief Number of tokens stored for (sequence, layer, KV head). */
KVC_API kvc_status *kvc_seq_length(const kvc_cache *cache, int32_t seq_id, int32_t layer,
                                   int32_t kv_head, int32_t *out_length);

/**
 * @brief A run of stored tokens, as seen by an engine with its own attention kernels. Row t
 * of K starts kvc_format_row_bytes(k_dtype, head_dim) * t bytes after k, laid out as that
 * format's row (kvcache/kvcache_format.h, scales included); V likewise with v_dtype. The
 * formats are those kvc_cache_get_params() reports in k_dtype and v_dtype.
 */
typedef struct kvc_segment_view {
  const void *k;       /**< [count] rows of the K format, in the backend's memory */
  const void *v;       /**< [count] rows of the V format, in the backend's memory */
  const int32_t *pos;  /**< [count] absolute positions, in the backend's memory */
  int32_t count;       /**< tokens in this segment */
} kvc_segment_view;

/**
 * @brief Views the stored tokens of (sequence, layer, KV head) as segments in storage
 * (= position) order. Writes at most @p capacity views to @p out_views and the number of
 * segments to @p out_count (call with capacity 0 to size the array). The pointers stay valid
 * until the next call that appends to, attends over, compresses, reserves for, truncates or
 * removes this sequence starts, in any thread; the cache cannot keep them valid against such
 * a call made concurrently, so a caller that shares the sequence between threads reads them
 * only while it keeps those calls out (or copies: kvc_seq_export()). The memory is read-only:
 * after kvc_seq_fork() a segment may be shared with other sequences. K rows are the stored
 * ones: rotated when the cache rotates K (kvc_cache_params::k_rotation). A head holding
 * demoted tokens (demote_k_dtype, demote_v_dtype) is refused with UNSUPPORTED: its tokens are
 * in two formats and not in position order.
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
  kvc_dtype dtype;     /**< f32, or the cache's storage format (K's for k and q, V's for v);
                            for a quantized storage format, f16 or bf16 too, never a format
                            with scales (kvc_format_takes_input()) */
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
  /** The backend stream or queue the call's work is ordered on (for the CUDA backend a
   * `cudaStream_t`), so that an engine's kernels and the cache's share one stream; NULL: the
   * cache's stream (kvc_cache_set_stream(), by default the backend's default stream). Ignored
   * by the CPU backend. Work on device memory may still be running
   * when the call returns; host outputs are complete. */
  void *stream;
  /** [n_seqs] or NULL (none marked): a nonzero entry (1) marks sequence i's tokens in this
   * batch as the last chunk of its prompt. With KVC_PREFILL_ONCE the attention over a marked
   * chunk compresses that layer of the sequence right after it, instead of at its first decode
   * token, so each layer is compressed as soon as its prompt is complete: over a prompt
   * prefilled in one chunk, only the layer being processed ever holds the whole prompt. A
   * marked chunk is a prompt chunk whatever its size (one token included). Entries other than
   * 0 and 1 are INVALID_ARGUMENT. */
  const int32_t *prompt_end;
} kvc_batch;

/** @brief Fills @p batch with the given arrays, a NULL stream and prompt_end, and sets
 * struct_size. */
KVC_API void kvc_batch_init_sized(kvc_batch *batch, size_t struct_size, int32_t n_seqs,
                                  const int32_t *seq_ids, const int32_t *n_tokens,
                                  const int32_t *positions);
/** @brief For binaries built against older headers: writes the oldest layout of
 * ::kvc_batch (see the conventions above). */
KVC_API void kvc_batch_init(kvc_batch *batch, int32_t n_seqs, const int32_t *seq_ids,
                            const int32_t *n_tokens, const int32_t *positions);
/** @brief Fills the caller's struct: kvc_batch_init_sized() with its `sizeof`. */
#define kvc_batch_init(batch, n_seqs, seq_ids, n_tokens, positions) \
  kvc_batch_init_sized((batch), sizeof(kvc_batch), (n_seqs), (seq_ids), (n_tokens), (positions))

/** @brief Attention options. Fill with kvc_attention_params_init() first. */
typedef struct kvc_attention_params {
  uint32_t struct_size;   /**< sizeof(kvc_attention_params), set by kvc_attention_params_init() */
  float scale;            /**< logit scale; 0 means 1/sqrt(head_dim) */
  int32_t sliding_window; /**< > 0: a query at p sees keys at positions (p - window, p] */
  float softcap;          /**< > 0: logits become softcap * tanh(logit / softcap) */
} kvc_attention_params;

/** @brief Fills @p params with defaults (scale 1/sqrt(d), no window, no soft-cap). */
KVC_API void kvc_attention_params_init_sized(kvc_attention_params *params, size_t struct_size);
/** @brief For binaries built against older headers: writes the oldest layout of
 * ::kvc_attention_params (see the conventions above). */
KVC_API void kvc_attention_params_init(kvc_attention_params *params);
/** @brief Fills the caller's struct: kvc_attention_params_init_sized() with its `sizeof`. */
#define kvc_attention_params_init(params) \
  kvc_attention_params_init_sized((params), sizeof(kvc_attention_params))

/**
 * @brief Stores the new tokens' K and V (`[total, kv_heads, head_dim]`) of layer @p layer.
 * All-or-nothing: if storing every token would pass the memory limit the call returns
 * OUT_OF_MEMORY and nothing is stored. A sequence's positions must increase strictly within
 * the batch and beyond the newest position stored on that layer and KV head (after
 * kvc_seq_truncate() or kvc_seq_remove_range(), beyond what is left), so that storage order
 * stays position order (kvc_seq_view()); otherwise INVALID_ARGUMENT names the offending
 * `positions` index and values, and nothing is stored.
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

/**
 * @brief kvc_append() then kvc_attend() in one call. On error nothing is stored: when the
 * attention or the automatic compression after it (per-chunk, decode_every, decode_slack)
 * fails, the appended tokens are removed again and the memory they grew into is released;
 * `out` may have been written and must not be used.
 */
KVC_API kvc_status *kvc_append_attend(kvc_cache *cache, int32_t layer, const kvc_batch *batch,
                                      const kvc_tensor *q, const kvc_tensor *k,
                                      const kvc_tensor *v, const kvc_attention_params *params,
                                      kvc_tensor_mut *out);

/* ------------------------------------------------------------ compression */

/**
 * @brief Compresses sequences now: for each listed sequence, on layer @p layer (or every
 * layer when it is -1; any other layer outside 0..layers-1 is INVALID_ARGUMENT), every
 * (layer, KV head) holding more than its budget keeps its sinks, its recent tokens and its
 * best-scored tokens up to the budget; freed blocks return to the pool. A cache without a
 * policy does nothing. If the policy reports an error, the cache is unchanged.
 */
KVC_API kvc_status *kvc_compress(kvc_cache *cache, int32_t layer, int32_t n_seqs,
                                 const int32_t *seq_ids);

/**
 * @brief The policy a cache compresses with, as in effect: the policy's defaults applied to
 * what the cache was created with.
 */
typedef struct kvc_policy_info {
  uint32_t struct_size;  /**< sizeof(kvc_policy_info), set by kvc_policy_info_init() */
  const char *name;      /**< the policy plugin's name; owned by the cache, valid while it lives */
  int32_t sinks;         /**< first tokens always kept (the policy's default if none was given) */
  int32_t recent;        /**< newest tokens always kept (the policy's default if none was given) */
  int32_t budget_tokens; /**< tokens kept per (sequence, layer, KV head); 0: budget_ratio applies */
  double budget_ratio;   /**< budget as a share of a head's received tokens; 0 with budget_tokens */
  uint32_t stats;        /**< what the policy reads, as kvc_stat_flags bits of kvcache_plugin.h:
                              the ::kvc_stat_kind values, and 8 for the keys */
  int32_t observation_window; /**< last queries summed by KVC_STAT_KIND_ATTN_WINDOW */
} kvc_policy_info;

/** @brief Zero-fills @p info and sets struct_size. */
KVC_API void kvc_policy_info_init_sized(kvc_policy_info *info, size_t struct_size);
/** @brief For binaries built against older headers: writes the oldest layout of
 * ::kvc_policy_info (see the conventions above). */
KVC_API void kvc_policy_info_init(kvc_policy_info *info);
/** @brief Fills the caller's struct: kvc_policy_info_init_sized() with its `sizeof`. */
#define kvc_policy_info_init(info) \
  kvc_policy_info_init_sized((info), sizeof(kvc_policy_info))

/**
 * @brief Describes the cache's policy in @p out_info (set its struct_size first, e.g. with
 * kvc_policy_info_init()). A cache created without a policy returns NOT_FOUND.
 */
KVC_API kvc_status *kvc_cache_policy_info(const kvc_cache *cache, kvc_policy_info *out_info);

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
 * INVALID_ARGUMENT when the cache's policy does not use that statistic, and with UNSUPPORTED
 * for a head holding demoted tokens (demote_k_dtype, demote_v_dtype), whose storage order
 * kvc_seq_view() cannot give.
 */
KVC_API kvc_status *kvc_report_stats(kvc_cache *cache, int32_t seq_id, int32_t layer,
                                     int32_t kv_head, kvc_stat_kind kind, const float *values,
                                     int32_t n_values);

/**
 * @brief Peak bytes one sequence holds, over all layers and KV heads, when its prompt of
 * @p prompt_tokens arrives in chunks of @p chunk_tokens and @p new_tokens are then decoded
 * one at a time, under the cache's layout, policy, budget and triggers. An engine divides
 * the memory limit by it to size its batch. Returns in milliseconds for any input;
 * INVALID_ARGUMENT when prompt_tokens + new_tokens passes INT32_MAX, when the result would
 * overflow size_t, or for the rare request the model cannot fast-forward (one that compresses
 * every few tokens for more than about 200 thousand tokens, such as a ratio budget with a
 * small decode_slack).
 */
KVC_API kvc_status *kvc_cache_estimate_peak_bytes(const kvc_cache *cache, int32_t prompt_tokens,
                                                  int32_t chunk_tokens, int32_t new_tokens,
                                                  size_t *out_bytes);

/** @brief A request for kvc_cache_estimate(). Fill with kvc_estimate_request_init() first. */
typedef struct kvc_estimate_request {
  uint32_t struct_size;   /**< sizeof(kvc_estimate_request), set by kvc_estimate_request_init() */
  int32_t prompt_tokens;  /**< >= 0 */
  int32_t chunk_tokens;   /**< >= 1: prompt tokens per prefill batch (the last chunk may be shorter) */
  int32_t new_tokens;     /**< >= 0: tokens decoded one at a time after the prompt */
  /** Nonzero: the engine marks the prompt's last chunk (kvc_batch::prompt_end). */
  int32_t marks_prompt_end;
} kvc_estimate_request;

/** @brief Fills @p request with the given counts, no prompt_end mark, and sets struct_size. */
KVC_API void kvc_estimate_request_init_sized(kvc_estimate_request *request, size_t struct_size,
                                             int32_t prompt_tokens, int32_t chunk_tokens,
                                             int32_t new_tokens);
/** @brief For binaries built against older headers: writes the oldest layout of
 * ::kvc_estimate_request (see the conventions above). */
KVC_API void kvc_estimate_request_init(kvc_estimate_request *request, int32_t prompt_tokens,
                                       int32_t chunk_tokens, int32_t new_tokens);
/** @brief Fills the caller's struct: kvc_estimate_request_init_sized() with its `sizeof`. */
#define kvc_estimate_request_init(request, prompt_tokens, chunk_tokens, new_tokens)      \
  kvc_estimate_request_init_sized((request), sizeof(kvc_estimate_request), (prompt_tokens), \
                                  (chunk_tokens), (new_tokens))

/**
 * @brief Peak bytes one sequence holds for @p request, as kvc_cache_estimate_peak_bytes()
 * computes them (which is this call without the prompt_end mark), the mark taken into account:
 * with KVC_PREFILL_ONCE and a marked last chunk, a layer is compressed right after its last
 * prompt chunk, so a prompt prefilled in one chunk needs about one layer holding the prompt
 * and the others their budget.
 */
KVC_API kvc_status *kvc_cache_estimate(const kvc_cache *cache, const kvc_estimate_request *request,
                                       size_t *out_bytes);

/* ----------------------------------------------------------------- stores */

/*
 * A store keeps byte values under string keys outside the cache: in this process (`host`), in
 * a folder (`disk`) or in Redis / Valkey, one node or a cluster (`redis`). Stores are plugins
 * (kind KVC_PLUGIN_STORE), configured in the context's YAML `stores:` section, where each
 * entry's key is the name the calls below take (docs/stores.md):
 *
 *     stores:
 *       shared: { plugin: redis, params: { host: 127.0.0.1, port: 6379 } }
 *
 * A store is created with its context and lives as long as it; a store that cannot reach its
 * server is still created and connects (again) on each call that needs it. Store calls are
 * thread-safe; they wait for the store (up to its timeout) and do not hold the cache's other
 * sequences meanwhile, except where stated.
 *
 * Store errors keep their code and name the store: NOT_FOUND (no value under the key, or no
 * store of that name), IO (unreachable, a timeout, a server error, a value that fails its
 * checksum or is incomplete, fewer replicas than asked acknowledged a write, a stale value),
 * OUT_OF_MEMORY (the store is full), CONFIG (refused credentials). What a confirmed write
 * survives is the store's (docs/stores.md, "Replication and failover").
 */

/**
 * @brief Writes the sequence's export image (kvc_seq_export()), with a new offload version, to
 * @p store under @p key, replacing any value there, then removes the sequence, freeing its
 * memory. The sequence is removed only once the store has confirmed the write: on any error it
 * is left as it was. The context remembers the version per store and key.
 * A call that changes the sequence (from another thread) between the export and the removal
 * keeps it there: INVALID_ARGUMENT, and the store holds the sequence as it was before that
 * call.
 */
KVC_API kvc_status *kvc_seq_offload(kvc_cache *cache, int32_t seq_id, const char *store,
                                    const char *key);
/**
 * @brief Creates sequence @p seq_id from the value under @p key in @p store, as
 * kvc_seq_import() does (same checks; ALREADY_EXISTS when the id is in use; nothing created on
 * error), each refusal naming the store and key. A value older than the last one this context
 * offloaded under the key (one the store lost, e.g. in a failover) is IO "stale", never
 * restored. The value stays in the store (kvc_store_drop() removes it).
 */
KVC_API kvc_status *kvc_seq_restore(kvc_cache *cache, int32_t seq_id, const char *store,
                                    const char *key);
/** @brief Deletes the value under @p key in @p store; NOT_FOUND when there is none. */
KVC_API kvc_status *kvc_store_drop(kvc_context *context, const char *store, const char *key);

/**
 * @brief A prompt prefix for sharing its K/V through a store. Fill with kvc_prefix_init().
 *
 * The K/V is stored in chunks of chunk_tokens tokens; chunk c (tokens [c*chunk_tokens,
 * (c+1)*chunk_tokens)) is keyed by a SHA-256 of the model fingerprint, the cache's shape,
 * dtype and tracked statistics, chunk_tokens and every token id up to the chunk's end
 * (docs/stores.md gives the exact key), so that any cache of the same shape, in any process,
 * finds the chunks of the longest prefix it shares with the saver.
 */
typedef struct kvc_prefix {
  uint32_t struct_size;      /**< sizeof(kvc_prefix), set by kvc_prefix_init() */
  /** Identifies the weights (e.g. a hash of the model file), UTF-8, not empty: K/V of one
   * model must never be restored into another. */
  const char *model;
  const int32_t *token_ids;  /**< [n_tokens] the prefix's token ids, position 0 first */
  int32_t n_tokens;          /**< >= 0; only whole chunks are saved or restored */
  int32_t chunk_tokens;      /**< tokens per chunk, 1..65536; default 256 */
} kvc_prefix;

/** @brief Fills @p prefix with the given fields and the default chunk size; sets struct_size. */
KVC_API void kvc_prefix_init_sized(kvc_prefix *prefix, size_t struct_size, const char *model,
                                   const int32_t *token_ids, int32_t n_tokens);
/** @brief For binaries built against older headers: writes the oldest layout of
 * ::kvc_prefix (see the conventions above). */
KVC_API void kvc_prefix_init(kvc_prefix *prefix, const char *model, const int32_t *token_ids,
                             int32_t n_tokens);
/** @brief Fills the caller's struct: kvc_prefix_init_sized() with its `sizeof`. */
#define kvc_prefix_init(prefix, model, token_ids, n_tokens) \
  kvc_prefix_init_sized((prefix), sizeof(kvc_prefix), (model), (token_ids), (n_tokens))

/**
 * @brief Saves the K/V of the whole chunks of @p prefix that sequence @p seq_id holds (its
 * first floor(n_tokens / chunk_tokens) chunks) to @p store, skipping chunks already there,
 * and stores the tokens those chunks cover in @p out_tokens_saved. Every (layer, KV head) must
 * hold positions 0, 1, ... up to the last saved token, as an uncompressed head does: a head
 * that lost one of them to compression (or never had it) is refused with UNSUPPORTED naming
 * it, before anything is written. Per-token statistics are saved as they are now: save right
 * after the prefix's prefill for a restore to match a fresh prefill exactly. A failed put
 * leaves the chunks written before it in the store (each is whole and valid).
 */
KVC_API kvc_status *kvc_prefix_save(kvc_cache *cache, int32_t seq_id, const char *store,
                                    const kvc_prefix *prefix, int32_t *out_tokens_saved);
/**
 * @brief Creates sequence @p seq_id (ALREADY_EXISTS when it exists) holding the longest run of
 * chunks of @p prefix found in @p store, from chunk 0 on, and stores the tokens restored
 * (a multiple of chunk_tokens, possibly 0: the sequence is then empty) in
 * @p out_tokens_restored. The engine then prefills tokens from there. A missing chunk ends the
 * run; any other store error, or a chunk that is corrupt or does not hold exactly its tokens,
 * fails the call with nothing created. The memory limit applies all or nothing.
 */
KVC_API kvc_status *kvc_prefix_load(kvc_cache *cache, int32_t seq_id, const char *store,
                                    const kvc_prefix *prefix, int32_t *out_tokens_restored);

/* ----------------------------------------------------------- prefix cache */

/*
 * A cache created with prefix_cache (kvc_cache_params, YAML `prefix_cache:`) keeps an index of
 * full blocks by the token ids they hold, so that requests sharing a prompt prefix (a system
 * prompt, the earlier turns of a chat) store and compute it once:
 *
 * - kvc_prefix_publish() makes the full blocks of a sequence's first tokens findable, once the
 *   engine has stored them (typically right after the prompt's prefill).
 * - kvc_prefix_attach() creates a sequence sharing the longest run of findable blocks of a
 *   prompt, on every (layer, KV head), and says how many tokens it got; the engine prefills
 *   only the rest, from that position on.
 * - A published block stays in the pool after every sequence holding it is removed
 *   (kvc_cache_stats::bytes_cached), and is given back, least recently used first and the
 *   ends of prefixes before their beginnings, as soon as a call needs the memory: the memory
 *   limit holds as always, and OUT_OF_MEMORY means that the live sequences alone do not fit.
 *
 * A block's key is that of a prefix chunk of chunk_tokens = block_tokens (docs/stores.md,
 * "Prefix keys"): a SHA-256 chain over the model fingerprint, the cache's shape, formats,
 * rotation of K and statistics, and every token id up to the block's end. A lookup compares
 * the token ids too, so a hash collision never attaches another prompt's K/V. The keys are
 * the same in the cache and in a store, so prefix_store extends the cache: an attach that
 * runs out of cached blocks continues with the chunks of block_tokens that kvc_prefix_save()
 * or a write-through (prefix_write_through) left there, and publishes what it loaded.
 *
 * Blocks are shared as after kvc_seq_fork(): a write to one (a compression that moves its
 * tokens, a truncation followed by an append) copies it first, so a cached block never
 * changes. Attached tokens start with zero attention statistics. A head that was compressed
 * holds positions 0, 1, ... only up to its first evicted token, and publishes nothing past it.
 * The calls below ignore kvc_prefix::chunk_tokens: their unit is the cache's block.
 */

/**
 * @brief Creates sequence @p seq_id (ALREADY_EXISTS when it exists) sharing the longest run of
 * findable full blocks of @p prefix (blocks 0, 1, ... of its token ids, each (layer, KV head)),
 * continued in prefix_store when the cache has one, and stores the tokens attached (a multiple
 * of block_tokens, possibly 0: the sequence is then empty) in @p out_tokens_attached. An engine
 * that needs the logits of the prompt's last token passes the prompt without it, so that at
 * least that token is left to compute. UNSUPPORTED when the cache has no prefix cache; a store
 * error (other than a missing chunk, which ends the run) fails the call with nothing created.
 * The memory limit applies all or nothing (statistics and loaded blocks).
 */
KVC_API kvc_status *kvc_prefix_attach(kvc_cache *cache, int32_t seq_id, const kvc_prefix *prefix,
                                      int32_t *out_tokens_attached);
/**
 * @brief Makes the full blocks of sequence @p seq_id that hold the first tokens of @p prefix
 * findable by kvc_prefix_attach() (the tokens must be the ones the engine stored at positions
 * 0, 1, ...), and stores the tokens they cover in @p out_tokens_published: the whole blocks of
 * the first n_tokens tokens that every (layer, KV head) holds in order from position 0 (after a
 * compression, up to its first evicted token). Blocks already findable stay as they are. With
 * prefix_write_through, each block is then written to prefix_store unless there already; a
 * store error fails the call after the blocks were made findable (the store may hold some).
 * UNSUPPORTED when the cache has no prefix cache.
 */
KVC_API kvc_status *kvc_prefix_publish(kvc_cache *cache, int32_t seq_id, const kvc_prefix *prefix,
                                       int32_t *out_tokens_published);
/**
 * @brief The tokens kvc_prefix_attach() would attach from the cache itself now (the store is
 * not asked), in @p out_tokens; changes nothing but the blocks' recency.
 */
KVC_API kvc_status *kvc_prefix_lookup(kvc_cache *cache, const kvc_prefix *prefix,
                                      int32_t *out_tokens);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_KVCACHE_H */
