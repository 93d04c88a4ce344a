/* Policy plugins that break the rules a host must check at its boundary, one per
 * GAPS_VARIANT:
 *   1  one library with two descriptors of the same name ("gaps_twice"), after a good one
 *      ("gaps_once"): the host must refuse the library and register neither.
 *   2  a budget-only policy ("gaps_wrapper") wrapping "streaming" with forwarded scorer
 *      parameters whose entry 1 has a NULL key.
 *   3  an entry point that logs with a level no kvc_log_level has, then returns a descriptor
 *      of a kind no kvc_plugin_kind has.
 */
#include <stddef.h>

#include "kvcache/kvcache_plugin.h"

static int32_t gaps_create(const kvc_host_api *host, const kvc_policy_param *params,
                           size_t n_params, void **out_instance, kvc_plugin_error *error) {
  (void)host;
  (void)params;
  (void)n_params;
  (void)error;
  *out_instance = 0;
  return KVC_OK;
}

static void gaps_destroy(void *instance) { (void)instance; }

static int32_t gaps_score(void *instance, const kvc_score_job *jobs, size_t n_jobs,
                          kvc_plugin_error *error) {
  (void)instance;
  (void)jobs;
  (void)n_jobs;
  (void)error;
  return KVC_OK;
}

#if GAPS_VARIANT == 2
static const kvc_policy_param forwarded[2] = {{"window", "4"}, {NULL, "1"}};
#endif

static void gaps_needs(void *instance, kvc_policy_needs *needs) {
  (void)instance;
#if GAPS_VARIANT == 2
  needs->scorer = "streaming";
  needs->scorer_params = forwarded;
  needs->n_scorer_params = 2;
#else
  (void)needs;
#endif
}

static int32_t gaps_budgets(void *instance, const kvc_budget_request *request, int32_t *budgets,
                            kvc_plugin_error *error) {
  int32_t h;
  (void)instance;
  (void)error;
  for (h = 0; h < request->n_heads; ++h) budgets[h] = request->configured[h];
  return KVC_OK;
}

static const kvc_policy_vtable gaps_vtable = {sizeof(kvc_policy_vtable), gaps_create,
                                              gaps_destroy, gaps_needs, gaps_score,
                                              gaps_budgets};

#if GAPS_VARIANT == 1
static const kvc_plugin_descriptor descriptors[3] = {
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "gaps_once", 1,
     &gaps_vtable},
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "gaps_twice", 1,
     &gaps_vtable},
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "gaps_twice", 2,
     &gaps_vtable}};
#elif GAPS_VARIANT == 2
static const kvc_plugin_descriptor descriptors[1] = {
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "gaps_wrapper", 1,
     &gaps_vtable}};
#else
static const kvc_plugin_descriptor descriptors[1] = {
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, (kvc_plugin_kind)7, "gaps_kind", 1,
     &gaps_vtable}};
#endif

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                           const kvc_plugin_descriptor **out_descriptors,
                                           size_t *out_count, kvc_plugin_error *error) {
  (void)error;
#if GAPS_VARIANT == 3
  host->log(host->host, (kvc_log_level)99, "gaps: a message at level 99");
#else
  (void)host;
#endif
  *out_descriptors = descriptors;
  *out_count = sizeof descriptors / sizeof descriptors[0];
  return KVC_OK;
}
