/* A backend that forwards every call to the CPU backend plugin (loaded from
 * KVC_CPU_BACKEND_PATH) and fails one chosen call, for tests that a failed backend call leaves
 * the cache as it was. kvc_fault_arm(entry, nth, code, message) makes the nth call of `entry`
 * from then on fail with `code` and `message` without forwarding it (alloc returns NULL);
 * later calls forward again. The state is global: one armed fault for every instance. Being
 * the one test backend with convert, it also checks every attend call's segment tables as a
 * backend keeping them resident would rely on them (resident_tables.h), demoted heads
 * included. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_forward.h"
#include "kvcache/kvcache_plugin.h"
#include "resident_tables.h"

/* The entries a fault can be armed on, as kvc_fault_arm() numbers them. */
enum { F_COPY, F_APPEND, F_ATTEND, F_COMPACT, F_READ_KEYS, F_READ_TOKENS, F_ALLOC, F_CONVERT, F_COUNT };

static const kvc_backend_vtable *cpu;
static long calls[F_COUNT];
static int armed_entry = -1;
static long armed_nth;
static int32_t armed_code;
static char armed_message[128];
static int fired;
static kvc_test_tables *tables; /* made at the first attend; one for every instance */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void make_tables(void) { tables = kvc_test_tables_create(); }

/* When the plugin is unloaded. */
__attribute__((destructor)) static void destroy_tables(void) { kvc_test_tables_destroy(tables); }


/* Counts a call of `entry`; nonzero when it is the armed one. */
static int fails(int entry) {
  ++calls[entry];
  if (entry != armed_entry || calls[entry] != armed_nth) return 0;
  fired = 1;
  armed_entry = -1;
  return 1;
}

static int32_t fail(kvc_plugin_error *error) {
  kvc_test_set_error(error, armed_message);
  return armed_code;
}

/* Loads the CPU backend on the first call. */
static int32_t load_cpu(const kvc_host_api *host, kvc_plugin_error *error) {
  if (!cpu) cpu = kvc_test_cpu_backend(host, "fault backend", error);
  return cpu ? KVC_OK : KVC_ERR_PLUGIN;
}

static int32_t fault_create(const kvc_host_api *host, void **out_instance,
                            kvc_plugin_error *error) {
  int32_t code = load_cpu(host, error);
  if (code != KVC_OK) return code;
  return cpu->create(host, out_instance, error);
}

static void fault_destroy(void *instance) { cpu->destroy(instance); }

static void *fault_alloc(void *instance, size_t bytes) {
  return fails(F_ALLOC) ? NULL : cpu->alloc(instance, bytes);
}

static void fault_free(void *instance, void *ptr) { cpu->free(instance, ptr); }

static int32_t fault_copy(void *instance, void *dst, const void *src, size_t bytes,
                          kvc_copy_kind kind, kvc_plugin_error *error) {
  return fails(F_COPY) ? fail(error) : cpu->copy(instance, dst, src, bytes, kind, error);
}

static int32_t fault_append(void *instance, const kvc_append_call *call,
                            kvc_plugin_error *error) {
  return fails(F_APPEND) ? fail(error) : cpu->append(instance, call, error);
}

/* Counted and failed as an append: the host makes one or the other per append. */
static int32_t fault_append_tensors(void *instance, const kvc_append_tensors_call *call,
                                    kvc_plugin_error *error) {
  return fails(F_APPEND) ? fail(error) : cpu->append_tensors(instance, call, error);
}

static int32_t fault_attend(void *instance, const kvc_attend_call *call,
                            kvc_plugin_error *error) {
  int32_t code;
  if (fails(F_ATTEND)) return fail(error);
  pthread_once(&tables_once, make_tables);
  if (!tables) {
    kvc_test_set_error(error, "fault backend: no memory for the table checks");
    return KVC_ERR_OUT_OF_MEMORY;
  }
  code = kvc_test_tables_check(tables, call, error);
  return code != KVC_OK ? code : cpu->attend(instance, call, error);
}

static int32_t fault_compact(void *instance, const kvc_compact_call *call,
                             kvc_plugin_error *error) {
  return fails(F_COMPACT) ? fail(error) : cpu->compact(instance, call, error);
}

static int32_t fault_read_keys(void *instance, const kvc_read_keys_call *call,
                               kvc_plugin_error *error) {
  return fails(F_READ_KEYS) ? fail(error) : cpu->read_keys(instance, call, error);
}

static int32_t fault_read_tokens(void *instance, const kvc_read_tokens_call *call,
                                 kvc_plugin_error *error) {
  return fails(F_READ_TOKENS) ? fail(error) : cpu->read_tokens(instance, call, error);
}

static int32_t fault_convert(void *instance, const kvc_convert_call *call,
                             kvc_plugin_error *error) {
  return fails(F_CONVERT) ? fail(error) : cpu->convert(instance, call, error);
}

static const kvc_backend_vtable fault_vtable = {
    sizeof(kvc_backend_vtable), fault_create,  fault_destroy, fault_alloc,
    fault_free,                 fault_copy,    fault_append,  fault_attend,
    fault_compact,              fault_read_keys, fault_read_tokens,
    /* No 1.3 entries: the faults it injects into copy reach every copy the host makes. */
    NULL,                       NULL,          NULL,          NULL,
    fault_append_tensors,       fault_convert};

static const kvc_plugin_descriptor fault_descriptor = {
    sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_BACKEND, "fault", 1,
    &fault_vtable};

/* Arms a fault on the nth call (from 1) of `entry` (copy, append, attend, compact, read_keys,
 * read_tokens, alloc, convert: 0..7) counted from now, failing with `code` and `message`; entry -1
 * disarms. Clears the fired flag. */
KVC_PLUGIN_EXPORT void kvc_fault_arm(int entry, long nth, int32_t code, const char *message) {
  size_t n = strlen(message);
  if (n >= sizeof armed_message) n = sizeof armed_message - 1;
  memcpy(armed_message, message, n);
  armed_message[n] = '\0';
  memset(calls, 0, sizeof calls);
  armed_entry = entry;
  armed_nth = nth;
  armed_code = code;
  fired = 0;
}

/* Whether the armed fault has failed a call since kvc_fault_arm(). */
KVC_PLUGIN_EXPORT int kvc_fault_fired(void) { return fired; }

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                           const kvc_plugin_descriptor **out_descriptors,
                                           size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &fault_descriptor;
  *out_count = 1;
  return KVC_OK;
}
