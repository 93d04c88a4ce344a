/* A backend that forwards every call to the CPU backend plugin (loaded from
 * KVC_CPU_BACKEND_PATH) and counts the calls, for tests of how many backend calls the core
 * makes. Built twice: against the current plugin header ("counting") and against the frozen
 * ABI 1.0 header under tests/plugin_abi/1.0 ("counting_1_0"), which proves that a 1.0 backend
 * loads and runs on this host: its vtable ends before read_tokens, so the host reads
 * positions and statistics through copy. kvc_counting_calls() returns the counts of the
 * most recently created instance. */
#include <stdlib.h>
#include <string.h>

#include "cpu_forward.h"
#include "kvcache/kvcache_plugin.h"
#if KVC_PLUGIN_ABI_MINOR >= 4
#include "resident_tables.h"
#endif

#ifndef COUNTING_NAME
#define COUNTING_NAME "counting"
#endif

/* Indices into the counters: the calls of each entry, then the copies of them that read
 * device memory into the host. */
enum { C_COPY, C_APPEND, C_ATTEND, C_COMPACT, C_READ_KEYS, C_READ_TOKENS, C_COPY_TO_HOST, C_COUNT };

typedef struct counting_instance {
  void *inner;
  long calls[C_COUNT];
#if KVC_PLUGIN_ABI_MINOR >= 4
  kvc_test_tables *tables; /* the segment tables it would keep resident */
#endif
} counting_instance;

static const kvc_backend_vtable *cpu;
static counting_instance *latest;


/* Loads the CPU backend on the first call. */
static int32_t load_cpu(const kvc_host_api *host, kvc_plugin_error *error) {
  if (!cpu) cpu = kvc_test_cpu_backend(host, "counting backend", error);
  return cpu ? KVC_OK : KVC_ERR_PLUGIN;
}

static counting_instance *self(void *instance) { return (counting_instance *)instance; }

static int32_t counting_create(const kvc_host_api *host, void **out_instance,
                               kvc_plugin_error *error) {
  counting_instance *instance;
  int32_t code = load_cpu(host, error);
  if (code != KVC_OK) return code;
  instance = (counting_instance *)calloc(1, sizeof *instance);
  if (!instance) return KVC_ERR_OUT_OF_MEMORY;
#if KVC_PLUGIN_ABI_MINOR >= 4
  instance->tables = kvc_test_tables_create();
  if (!instance->tables) {
    free(instance);
    return KVC_ERR_OUT_OF_MEMORY;
  }
#endif
  code = cpu->create(host, &instance->inner, error);
  if (code != KVC_OK) {
#if KVC_PLUGIN_ABI_MINOR >= 4
    kvc_test_tables_destroy(instance->tables);
#endif
    free(instance);
    return code;
  }
  latest = instance;
  *out_instance = instance;
  return KVC_OK;
}

static void counting_destroy(void *instance) {
  cpu->destroy(self(instance)->inner);
#if KVC_PLUGIN_ABI_MINOR >= 4
  kvc_test_tables_destroy(self(instance)->tables);
#endif
  if (latest == instance) latest = NULL;
  free(instance);
}

static void *counting_alloc(void *instance, size_t bytes) {
  return cpu->alloc(self(instance)->inner, bytes);
}

static void counting_free(void *instance, void *ptr) { cpu->free(self(instance)->inner, ptr); }

static int32_t counting_copy(void *instance, void *dst, const void *src, size_t bytes,
                             kvc_copy_kind kind, kvc_plugin_error *error) {
  ++self(instance)->calls[C_COPY];
  if (kind == KVC_COPY_DEVICE_TO_HOST) ++self(instance)->calls[C_COPY_TO_HOST];
  return cpu->copy(self(instance)->inner, dst, src, bytes, kind, error);
}

static int32_t counting_append(void *instance, const kvc_append_call *call,
                               kvc_plugin_error *error) {
  ++self(instance)->calls[C_APPEND];
  return cpu->append(self(instance)->inner, call, error);
}

static int32_t counting_attend(void *instance, const kvc_attend_call *call,
                               kvc_plugin_error *error) {
  ++self(instance)->calls[C_ATTEND];
#if KVC_PLUGIN_ABI_MINOR >= 4
  {
    int32_t code = kvc_test_tables_check(self(instance)->tables, call, error);
    if (code != KVC_OK) return code;
  }
#endif
  return cpu->attend(self(instance)->inner, call, error);
}

static int32_t counting_compact(void *instance, const kvc_compact_call *call,
                                kvc_plugin_error *error) {
  ++self(instance)->calls[C_COMPACT];
  return cpu->compact(self(instance)->inner, call, error);
}

static int32_t counting_read_keys(void *instance, const kvc_read_keys_call *call,
                                  kvc_plugin_error *error) {
  ++self(instance)->calls[C_READ_KEYS];
  return cpu->read_keys(self(instance)->inner, call, error);
}

#if KVC_PLUGIN_ABI_MINOR >= 1
static int32_t counting_read_tokens(void *instance, const kvc_read_tokens_call *call,
                                    kvc_plugin_error *error) {
  ++self(instance)->calls[C_READ_TOKENS];
  return cpu->read_tokens(self(instance)->inner, call, error);
}
#endif

static const kvc_backend_vtable counting_vtable = {
    sizeof(kvc_backend_vtable), counting_create, counting_destroy, counting_alloc,
    counting_free, counting_copy, counting_append, counting_attend, counting_compact,
    counting_read_keys,
#if KVC_PLUGIN_ABI_MINOR >= 1
    counting_read_tokens,
#endif
#if KVC_PLUGIN_ABI_MINOR >= 3
    /* No 1.3 entries: its instances are made by create and its copies go through copy. */
    NULL, NULL, NULL, NULL,
#endif
#if KVC_PLUGIN_ABI_MINOR >= 4
    /* No 1.4 append_tensors: the host sends append one job per slot. */
    NULL,
#endif
#if KVC_PLUGIN_ABI_MINOR >= 6
    /* No 1.6 convert: caches on it do not demote. */
    NULL,
#endif
};

static const kvc_plugin_descriptor counting_descriptor = {
    sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_BACKEND, COUNTING_NAME, 1,
    &counting_vtable};

/* The calls the latest instance received: copy, append, attend, compact, read_keys,
 * read_tokens and, of the copies, those from device to host, in that order; returns 0 when no
 * instance exists. */
KVC_PLUGIN_EXPORT int kvc_counting_calls(long out[7]) {
  if (!latest) return 0;
  memcpy(out, latest->calls, sizeof latest->calls);
  return 1;
}

#if KVC_PLUGIN_ABI_MINOR >= 4
/* Of the latest instance, the segment tables a backend keeping them resident would have
 * uploaded and those it would have reused; returns 0 when no instance exists. */
KVC_PLUGIN_EXPORT int kvc_counting_tables(long out[2]) {
  if (!latest) return 0;
  kvc_test_tables_counts(latest->tables, &out[0], &out[1]);
  return 1;
}
#endif

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                           const kvc_plugin_descriptor **out_descriptors,
                                           size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &counting_descriptor;
  *out_count = 1;
  return KVC_OK;
}
