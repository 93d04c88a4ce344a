/* Test policy plugins, one source built in several variants (TEST_POLICY_VARIANT):
 *   0  good: two policies ("test_policy_a", "test_policy_b") in one library; the entry point
 *      checks the host API, uses its allocator and parallel_for, and logs a message.
 *   1  a descriptor whose struct_size is larger than the host knows: must be refused.
 *   2  an entry point that fails with a message: the host must report it, naming the file.
 *   3  a library that needs a symbol nothing defines: the dynamic loader refuses it, and the
 *      host's error names the file and passes on the loader's reason (the missing symbol).
 */
#include <string.h>

#include "kvcache/kvcache_plugin.h"

#ifndef TEST_POLICY_VARIANT
#define TEST_POLICY_VARIANT 0
#endif

#define EXPORT KVC_PLUGIN_EXPORT

static int32_t policy_create(const kvc_host_api *host, const kvc_policy_param *params,
                             size_t n_params, void **out_instance, kvc_plugin_error *error) {
  (void)host;
  (void)params;
  (void)n_params;
  (void)error;
  *out_instance = 0;
  return KVC_OK;
}

static void policy_destroy(void *instance) { (void)instance; }

static int32_t policy_score(void *instance, const kvc_score_job *jobs, size_t n_jobs,
                            kvc_plugin_error *error) {
  size_t j;
  int32_t t;
  (void)instance;
  (void)error;
  for (j = 0; j < n_jobs; ++j) {
    const kvc_score_job *job = KVC_PLUGIN_AT(const kvc_score_job, jobs, j);
    for (t = 0; t < job->n_tokens; ++t) job->scores[t] = (float)job->pos[t];
  }
  return KVC_OK;
}

static void policy_needs(void *instance, kvc_policy_needs *out_needs) {
  (void)instance;
  out_needs->stats = 0;
  out_needs->observation_window = 0;
  out_needs->scorer = 0;
}

static const kvc_policy_vtable test_vtable = {.struct_size = sizeof(kvc_policy_vtable),
                                              .create = policy_create,
                                              .destroy = policy_destroy,
                                              .needs = policy_needs,
                                              .score = policy_score};

#if TEST_POLICY_VARIANT != 1
static void set_error(kvc_plugin_error *error, const char *message) {
  size_t n = strlen(message);
  if (!error) return;
  if (n >= sizeof error->message) n = sizeof error->message - 1;
  memcpy(error->message, message, n);
  error->message[n] = '\0';
}
#endif

#if TEST_POLICY_VARIANT == 0

static const kvc_plugin_descriptor descriptors[2] = {
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "test_policy_a",
     7, &test_vtable},
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "test_policy_b",
     8, &test_vtable}};

static void mark(void *user_data, size_t begin, size_t end) {
  unsigned char *seen = (unsigned char *)user_data;
  size_t i;
  for (i = begin; i < end; ++i) seen[i] += 1;
}

EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                const kvc_plugin_descriptor **out_descriptors, size_t *out_count,
                                kvc_plugin_error *error) {
  enum { N = 1000 };
  unsigned char *seen;
  size_t i;
  if (!host || host->struct_size < sizeof(kvc_host_api) ||
      (host->abi_version >> 16) != KVC_PLUGIN_ABI_MAJOR || !host->log || !host->alloc ||
      !host->free || !host->parallel_for) {
    set_error(error, "test_policy: the host API is missing or incomplete");
    return KVC_ERR_PLUGIN;
  }
  seen = (unsigned char *)host->alloc(host->host, N, 64);
  if (!seen || ((size_t)seen % 64) != 0) {
    set_error(error, "test_policy: host alloc failed or is misaligned");
    return KVC_ERR_PLUGIN;
  }
  memset(seen, 0, N);
  host->parallel_for(host->host, N, 16, mark, seen);
  for (i = 0; i < N; ++i) {
    if (seen[i] != 1) {
      host->free(host->host, seen);
      set_error(error, "test_policy: parallel_for did not visit every index exactly once");
      return KVC_ERR_PLUGIN;
    }
  }
  host->free(host->host, seen);
  host->log(host->host, KVC_LOG_INFO, "test_policy: hello from the entry point");
  *out_descriptors = descriptors;
  *out_count = 2;
  return KVC_OK;
}

#elif TEST_POLICY_VARIANT == 1

/* A descriptor from a "newer" ABI minor with a field the host cannot know about. */
typedef struct bigger_descriptor {
  kvc_plugin_descriptor base;
  uint64_t future_field[4];
} bigger_descriptor;

static const bigger_descriptor big = {
    {sizeof(bigger_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "test_policy_big", 1,
     &test_vtable},
    {1, 2, 3, 4}};

EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                const kvc_plugin_descriptor **out_descriptors, size_t *out_count,
                                kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &big.base;
  *out_count = 1;
  return KVC_OK;
}

#elif TEST_POLICY_VARIANT == 2

EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                const kvc_plugin_descriptor **out_descriptors, size_t *out_count,
                                kvc_plugin_error *error) {
  (void)host;
  (void)out_descriptors;
  (void)out_count;
  (void)test_vtable;
  set_error(error, "deliberate failure from test_policy_fail");
  return KVC_ERR_PLUGIN;
}

#elif TEST_POLICY_VARIANT == 3

/* Defined nowhere: loading the library fails with an undefined symbol. */
extern int32_t kvc_test_symbol_defined_nowhere(int32_t x);

EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                const kvc_plugin_descriptor **out_descriptors, size_t *out_count,
                                kvc_plugin_error *error) {
  (void)host;
  (void)out_descriptors;
  (void)test_vtable;
  *out_count = (size_t)kvc_test_symbol_defined_nowhere(1);
  set_error(error, "unreachable");
  return KVC_ERR_PLUGIN;
}

#endif
