/* A policy plugin that claims a plugin ABI minor newer than the host's and appends one entry
 * to its vtable, as that minor would. NEWER_MINOR_ENTRY_SET 1: the entry is set, so the
 * plugin needs something this host lacks and must be refused with a message naming it;
 * 0: the entry is NULL and the host loads it ("newer_minor_unused"). */
#include "kvcache/kvcache_plugin.h"

typedef struct newer_vtable {
  kvc_policy_vtable known;
  int32_t (*future_entry)(void *instance);
} newer_vtable;

static int32_t newer_create(const kvc_host_api *host, const kvc_policy_param *params,
                            size_t n_params, void **out_instance, kvc_plugin_error *error) {
  (void)host;
  (void)params;
  (void)n_params;
  (void)error;
  *out_instance = NULL;
  return KVC_OK;
}

static void newer_destroy(void *instance) { (void)instance; }

static void newer_needs(void *instance, kvc_policy_needs *needs) {
  (void)instance;
  (void)needs;
}

static int32_t newer_score(void *instance, const kvc_score_job *jobs, size_t n_jobs,
                           kvc_plugin_error *error) {
  size_t j;
  int32_t i;
  (void)instance;
  (void)error;
  for (j = 0; j < n_jobs; ++j) {
    const kvc_score_job *job = KVC_PLUGIN_AT(const kvc_score_job, jobs, j);
    for (i = 0; i < job->n_tokens; ++i) job->scores[i] = (float)job->pos[i];
  }
  return KVC_OK;
}

static int32_t future_entry(void *instance) {
  (void)instance;
  return KVC_OK;
}

static const newer_vtable vtable = {
    {sizeof(newer_vtable), newer_create, newer_destroy, newer_needs, newer_score, NULL},
    NEWER_MINOR_ENTRY_SET ? future_entry : NULL};

static const kvc_plugin_descriptor descriptor = {
    sizeof(kvc_plugin_descriptor), (KVC_PLUGIN_ABI_MAJOR << 16) | (KVC_PLUGIN_ABI_MINOR + 1),
    KVC_PLUGIN_POLICY, NEWER_MINOR_ENTRY_SET ? "newer_minor_needed" : "newer_minor_unused", 1,
    &vtable};

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                           const kvc_plugin_descriptor **out_descriptors,
                                           size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &descriptor;
  *out_count = 1;
  return KVC_OK;
}
