/* A policy plugin built against the frozen plugin ABI 1.0 header (tests/plugin_abi/1.0),
 * loaded by a newer host to prove that an older plugin keeps working: "abi_1_0_oldest" keeps
 * the oldest tokens (score = -position) and asks for accumulated attention, which it checks
 * it receives for every token. The host hands it score jobs of its own, larger size: the
 * plugin steps through them by their struct_size, as the 1.0 header says. */
#include <string.h>

#include "kvcache/kvcache_plugin.h"

#if KVC_PLUGIN_ABI_MINOR != 0
#error "abi_1_0_policy.c must be built against tests/plugin_abi/1.0"
#endif

static int32_t oldest_create(const kvc_host_api *host, const kvc_policy_param *params,
                             size_t n_params, void **out_instance, kvc_plugin_error *error) {
  (void)host;
  (void)params;
  (void)error;
  *out_instance = NULL;
  return n_params == 0 ? KVC_OK : KVC_ERR_CONFIG;
}

static void oldest_destroy(void *instance) { (void)instance; }

static void oldest_needs(void *instance, kvc_policy_needs *needs) {
  (void)instance;
  needs->stats = KVC_STAT_ATTN_SUM;
}

static int32_t oldest_score(void *instance, const kvc_score_job *jobs, size_t n_jobs,
                            kvc_plugin_error *error) {
  size_t j;
  int32_t i;
  (void)instance;
  for (j = 0; j < n_jobs; ++j) {
    const kvc_score_job *job = KVC_PLUGIN_AT(const kvc_score_job, jobs, j);
    if (job->struct_size < sizeof(kvc_score_job) || (job->n_tokens > 0 && !job->attn_sum)) {
      strcpy(error->message, "abi_1_0_oldest: a score job lacks what ABI 1.0 promises");
      return KVC_ERR_INVALID_ARGUMENT;
    }
    for (i = 0; i < job->n_tokens; ++i) job->scores[i] = -(float)job->pos[i];
  }
  return KVC_OK;
}

static const kvc_policy_vtable oldest_vtable = {sizeof(kvc_policy_vtable), oldest_create,
                                                oldest_destroy, oldest_needs, oldest_score,
                                                NULL};

static const kvc_plugin_descriptor oldest_descriptor = {
    sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "abi_1_0_oldest", 1,
    &oldest_vtable};

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                           const kvc_plugin_descriptor **out_descriptors,
                                           size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &oldest_descriptor;
  *out_count = 1;
  return KVC_OK;
}
