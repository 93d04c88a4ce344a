/* A backend of this header's ABI, "config_probe", that forwards to the CPU backend plugin
 * (loaded from KVC_CPU_BACKEND_PATH) and records what the ABI 1.3 and 1.4 entries receive: the
 * kvc_backend_config of its latest instance, the streams of copy_async, free_async and
 * synchronize, the append calls (per job, and whole tensors with their slots), and whether
 * every call that takes a stream got the one a test watches (kvc_config_probe_watch). It
 * refuses bf16 K storage, a rotation of K (its CPU instances are made without the config),
 * and a configuration whose `backend.params` hold `refuse: <what>`, with KVC_ERR_UNSUPPORTED
 * and a message naming what it lacks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_forward.h"
#include "kvcache/kvcache_plugin.h"

/* What the tests read back through kvc_config_probe_record(). */
typedef struct config_probe_record {
  int instances;        /* instances made by create_with_config */
  int plain_creates;    /* instances made by create */
  int32_t n_layers, n_kv_heads, n_q_heads, head_dim, block_tokens, device;
  kvc_dtype k_dtype, v_dtype;
  kvc_layout layout;
  size_t memory_limit;
  size_t n_params;
  char params[256];     /* "key=value;" for each parameter, in order */
  long copies_async, frees_async, synchronizes;
  void *last_copy_stream, *last_free_stream;
  long appends, appends_tensors;  /* calls of append (jobs) and of append_tensors */
  /* Of the latest append_tensors call: its tensors, rows, slots, and whether the slots cover
   * every (row, KV head) exactly once. */
  const void *last_src_k, *last_src_v;
  int32_t last_n_tokens, last_n_kv_heads;
  size_t last_n_slots;
  int covers_once;
  /* Calls that take a stream, on the watched stream and on any other; the first of the others
   * by entry name. */
  long on_watched, elsewhere;
  char first_elsewhere[32];
} config_probe_record;

static const kvc_backend_vtable *cpu;
static config_probe_record record;
static const void *watched_stream;

static void note_stream(const char *entry, const void *stream) {
  if (stream == watched_stream) {
    ++record.on_watched;
    return;
  }
  if (record.elsewhere++ == 0) {
    snprintf(record.first_elsewhere, sizeof record.first_elsewhere, "%s", entry);
  }
}

static int32_t load_cpu(const kvc_host_api *host, kvc_plugin_error *error) {
  if (!cpu) cpu = kvc_test_cpu_backend(host, "config_probe backend", error);
  return cpu ? KVC_OK : KVC_ERR_PLUGIN;
}

static int32_t probe_create(const kvc_host_api *host, void **out_instance,
                            kvc_plugin_error *error) {
  int32_t code = load_cpu(host, error);
  if (code != KVC_OK) return code;
  ++record.plain_creates;
  return cpu->create(host, out_instance, error);
}

static int32_t probe_create_with_config(const kvc_host_api *host,
                                        const kvc_backend_config *config, void **out_instance,
                                        kvc_plugin_error *error) {
  size_t i;
  int32_t code = load_cpu(host, error);
  if (code != KVC_OK) return code;
  if (!KVC_PLUGIN_HAS_FIELD(config, kvc_backend_config, n_params)) {
    kvc_test_set_error(error, "config_probe backend: the host's kvc_backend_config is too small");
    return KVC_ERR_PLUGIN;
  }
  if (config->k_dtype == KVC_DTYPE_BF16) {
    kvc_test_set_error(error, "config_probe backend: this backend lacks bf16 K storage");
    return KVC_ERR_UNSUPPORTED;
  }
  if (KVC_PLUGIN_HAS_FIELD(config, kvc_backend_config, k_rotation) &&
      config->k_rotation != KVC_ROTATION_NONE) {
    kvc_test_set_error(error, "config_probe backend: this backend does not rotate K");
    return KVC_ERR_UNSUPPORTED;
  }
  for (i = 0; i < config->n_params; ++i) {
    if (strcmp(config->params[i].key, "refuse") == 0) {
      char message[256];
      snprintf(message, sizeof message, "config_probe backend: this backend lacks %s",
               config->params[i].value);
      kvc_test_set_error(error, message);
      return KVC_ERR_UNSUPPORTED;
    }
  }
  ++record.instances;
  record.n_layers = config->n_layers;
  record.n_kv_heads = config->n_kv_heads;
  record.n_q_heads = config->n_q_heads;
  record.head_dim = config->head_dim;
  record.k_dtype = config->k_dtype;
  record.v_dtype = config->v_dtype;
  record.layout = config->layout;
  record.block_tokens = config->block_tokens;
  record.memory_limit = config->memory_limit;
  record.device = config->device;
  record.n_params = config->n_params;
  record.params[0] = '\0';
  for (i = 0; i < config->n_params; ++i) {
    size_t used = strlen(record.params);
    snprintf(record.params + used, sizeof record.params - used, "%s=%s;", config->params[i].key,
             config->params[i].value);
  }
  return cpu->create(host, out_instance, error);
}

static void probe_destroy(void *instance) { cpu->destroy(instance); }
static void *probe_alloc(void *instance, size_t bytes) { return cpu->alloc(instance, bytes); }
static void probe_free(void *instance, void *ptr) { cpu->free(instance, ptr); }

static int32_t probe_copy(void *instance, void *dst, const void *src, size_t bytes,
                          kvc_copy_kind kind, kvc_plugin_error *error) {
  return cpu->copy(instance, dst, src, bytes, kind, error);
}

static int32_t probe_append(void *instance, const kvc_append_call *call,
                            kvc_plugin_error *error) {
  ++record.appends;
  note_stream("append", call->stream);
  return cpu->append(instance, call, error);
}

/* 1 when the slots of `call` cover each (row, KV head) of its tensors exactly once. */
static int covers_once(const kvc_append_tensors_call *call) {
  size_t cells = (size_t)call->n_tokens * (size_t)call->n_kv_heads, i;
  int32_t t;
  int ok = 1;
  unsigned char *seen = (unsigned char *)calloc(cells ? cells : 1, 1);
  if (!seen) return 0;
  for (i = 0; i < call->n_slots && ok; ++i) {
    const kvc_append_slot *slot = KVC_PLUGIN_AT(const kvc_append_slot, call->slots, i);
    for (t = slot->first_token; t < slot->first_token + slot->n_tokens && ok; ++t) {
      size_t cell = (size_t)t * (size_t)call->n_kv_heads + (size_t)slot->kv_head;
      if (t < 0 || t >= call->n_tokens || slot->kv_head < 0 ||
          slot->kv_head >= call->n_kv_heads || seen[cell])
        ok = 0;
      else
        seen[cell] = 1;
    }
  }
  for (i = 0; i < cells && ok; ++i) ok = seen[i];
  free(seen);
  return ok;
}

static int32_t probe_append_tensors(void *instance, const kvc_append_tensors_call *call,
                                    kvc_plugin_error *error) {
  ++record.appends_tensors;
  note_stream("append_tensors", call->stream);
  record.last_src_k = call->src_k;
  record.last_src_v = call->src_v;
  record.last_n_tokens = call->n_tokens;
  record.last_n_kv_heads = call->n_kv_heads;
  record.last_n_slots = call->n_slots;
  record.covers_once = covers_once(call);
  return cpu->append_tensors(instance, call, error);
}

static int32_t probe_attend(void *instance, const kvc_attend_call *call,
                            kvc_plugin_error *error) {
  note_stream("attend", call->stream);
  return cpu->attend(instance, call, error);
}

static int32_t probe_compact(void *instance, const kvc_compact_call *call,
                             kvc_plugin_error *error) {
  note_stream("compact", call->stream);
  return cpu->compact(instance, call, error);
}

static int32_t probe_read_keys(void *instance, const kvc_read_keys_call *call,
                               kvc_plugin_error *error) {
  note_stream("read_keys", call->stream);
  return cpu->read_keys(instance, call, error);
}

static int32_t probe_read_tokens(void *instance, const kvc_read_tokens_call *call,
                                 kvc_plugin_error *error) {
  note_stream("read_tokens", call->stream);
  return cpu->read_tokens(instance, call, error);
}

static int32_t probe_copy_async(void *instance, void *dst, const void *src, size_t bytes,
                                kvc_copy_kind kind, void *stream, kvc_plugin_error *error) {
  ++record.copies_async;
  record.last_copy_stream = stream;
  note_stream("copy_async", stream);
  return cpu->copy(instance, dst, src, bytes, kind, error);
}

#if !PARTIAL_STREAMS
static void probe_free_async(void *instance, void *ptr, void *stream) {
  ++record.frees_async;
  record.last_free_stream = stream;
  note_stream("free_async", stream);
  cpu->free(instance, ptr);
}

static int32_t probe_synchronize(void *instance, void *stream, kvc_plugin_error *error) {
  (void)instance;
  (void)error;
  ++record.synchronizes;
  note_stream("synchronize", stream);
  return KVC_OK;
}
#endif

/* PARTIAL_STREAMS: a variant "partial_streams" with copy_async but without free_async and
 * synchronize, which the host refuses. */
#if PARTIAL_STREAMS
#define PROBE_NAME "partial_streams"
#define PROBE_FREE_ASYNC NULL
#define PROBE_SYNCHRONIZE NULL
#else
#define PROBE_NAME "config_probe"
#define PROBE_FREE_ASYNC probe_free_async
#define PROBE_SYNCHRONIZE probe_synchronize
#endif

static const kvc_backend_vtable probe_vtable = {
    sizeof(kvc_backend_vtable), probe_create,       probe_destroy,     probe_alloc,
    probe_free,                 probe_copy,         probe_append,      probe_attend,
    probe_compact,              probe_read_keys,    probe_read_tokens, probe_create_with_config,
    probe_copy_async,           PROBE_FREE_ASYNC,   PROBE_SYNCHRONIZE, probe_append_tensors,
    NULL};

static const kvc_plugin_descriptor probe_descriptor = {
    sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_BACKEND, PROBE_NAME, 1,
    &probe_vtable};

/* The stream whose calls on_watched counts (NULL at first). */
KVC_PLUGIN_EXPORT void kvc_config_probe_watch(const void *stream) { watched_stream = stream; }

/* Copies the record into *out and clears it. */
KVC_PLUGIN_EXPORT void kvc_config_probe_record(config_probe_record *out) {
  *out = record;
  memset(&record, 0, sizeof record);
}

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                           const kvc_plugin_descriptor **out_descriptors,
                                           size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &probe_descriptor;
  *out_count = 1;
  return KVC_OK;
}
