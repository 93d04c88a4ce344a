/*
 * A custom eviction policy written in plain C: the path a researcher follows.
 *
 * Rule ("age-normalised heavy hitters"): H2O keeps the tokens with the largest accumulated
 * attention, which favours old tokens simply because more queries have seen them. This
 * policy divides the accumulated attention by the token's age (how many positions ago it
 * arrived, plus one) raised to `power`, so a token is kept for being attended to often
 * relative to its lifetime.
 *
 *   score(i) = attn_sum(i) / (newest_pos - pos(i) + 1) ^ power
 *
 * Build it as a shared library against the kvcache headers only (no link to libkvcache) and
 * load it from YAML:
 *
 *   plugins: { paths: [/path/to/libkvc_policy_age_normalised.so] }
 *   policy: { name: age_normalised, budget: 256, params: { power: 1.0 } }
 */
#include <kvcache/kvcache_plugin.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct age_policy {
  double power;
} age_policy;

static int32_t fail(kvc_plugin_error *error, int32_t code, const char *message, const char *key,
                    const char *value) {
  snprintf(error->message, sizeof error->message, message, key, value);
  return code;
}

static int32_t age_create(const kvc_host_api *host, const kvc_policy_param *params,
                          size_t n_params, void **out_instance, kvc_plugin_error *error) {
  age_policy *policy;
  size_t i;
  double power = 1.0;
  (void)host;
  for (i = 0; i < n_params; ++i) {
    char *end = NULL;
    if (strcmp(params[i].key, "power") != 0) {
      return fail(error, KVC_ERR_CONFIG,
                  "policy.params.%s: unknown parameter for age_normalised (known: power)%s",
                  params[i].key, "");
    }
    power = strtod(params[i].value, &end);
    if (end == params[i].value || *end != '\0' || !(power >= 0.0) || power > 8.0) {
      return fail(error, KVC_ERR_CONFIG,
                  "policy.params.%s: expected a number in [0, 8], got '%s'", params[i].key,
                  params[i].value);
    }
  }
  policy = (age_policy *)malloc(sizeof *policy);
  if (!policy) return fail(error, KVC_ERR_OUT_OF_MEMORY, "out of memory%s%s", "", "");
  policy->power = power;
  *out_instance = policy;
  return KVC_OK;
}

static void age_destroy(void *instance) { free(instance); }

static void age_needs(void *instance, kvc_policy_needs *needs) {
  (void)instance;
  needs->stats = KVC_STAT_ATTN_SUM;
}

static int32_t age_score(void *instance, const kvc_score_job *jobs, size_t n_jobs,
                         kvc_plugin_error *error) {
  const age_policy *policy = (const age_policy *)instance;
  size_t j;
  (void)error;
  for (j = 0; j < n_jobs; ++j) {
    const kvc_score_job *job = KVC_PLUGIN_AT(const kvc_score_job, jobs, j); /* strided */
    int32_t newest = 0, i;
    for (i = 0; i < job->n_tokens; ++i) {
      if (job->pos[i] > newest) newest = job->pos[i];
    }
    for (i = 0; i < job->n_tokens; ++i) {
      double age = (double)(newest - job->pos[i]) + 1.0;
      job->scores[i] = (float)(job->attn_sum[i] / pow(age, policy->power));
    }
  }
  return KVC_OK;
}

static const kvc_policy_vtable age_vtable = {
    sizeof(kvc_policy_vtable), age_create, age_destroy, age_needs, age_score, NULL};

static const kvc_plugin_descriptor age_descriptor = {
    sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "age_normalised",
    1, &age_vtable};

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host, const kvc_plugin_descriptor **out_descriptors,
                         size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &age_descriptor;
  *out_count = 1;
  return KVC_OK;
}
