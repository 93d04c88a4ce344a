/* A test policy that records the statistics the host hands it, so tests can compare them
 * with values computed from a naive attention. Parameters:
 *   stats   mask of kvc_stat_flags to ask for (default 7: sum, last, window)
 *   window  observation window W (default 4)
 *   score   which statistic is the score: sum | last | window | position (default position)
 *   fail    1: score() fails, to test that a failing policy leaves the cache unchanged
 * kvc_probe_read() returns what the last score() call saw for one (layer, KV head).
 */
#include <stdlib.h>
#include <string.h>

#include "kvcache/kvcache_plugin.h"

#define EXPORT KVC_PLUGIN_EXPORT
#define PROBE_LAYERS 4
#define PROBE_HEADS 8
#define PROBE_TOKENS 8192

typedef struct probe {
  uint32_t stats;
  int32_t window;
  int score_by; /* 0 position, 1 sum, 2 last, 3 window */
  int fail;
} probe;

static int32_t recorded_n[PROBE_LAYERS][PROBE_HEADS];
static int32_t recorded_pos[PROBE_LAYERS][PROBE_HEADS][PROBE_TOKENS];
static float recorded[3][PROBE_LAYERS][PROBE_HEADS][PROBE_TOKENS];

static int32_t probe_create(const kvc_host_api *host, const kvc_policy_param *params,
                            size_t n_params, void **out_instance, kvc_plugin_error *error) {
  probe p = {7u, 4, 0, 0};
  size_t i;
  (void)host;
  for (i = 0; i < n_params; ++i) {
    const char *key = params[i].key, *value = params[i].value;
    if (strcmp(key, "stats") == 0) {
      p.stats = (uint32_t)atoi(value);
    } else if (strcmp(key, "window") == 0) {
      p.window = atoi(value);
    } else if (strcmp(key, "fail") == 0) {
      p.fail = atoi(value);
    } else if (strcmp(key, "score") == 0) {
      p.score_by = strcmp(value, "sum") == 0 ? 1 : strcmp(value, "last") == 0 ? 2
                 : strcmp(value, "window") == 0 ? 3 : 0;
    } else {
      strcpy(error->message, "policy.params: unknown parameter for stats_probe");
      return KVC_ERR_CONFIG;
    }
  }
  *out_instance = malloc(sizeof(probe));
  if (!*out_instance) return KVC_ERR_OUT_OF_MEMORY;
  memcpy(*out_instance, &p, sizeof p);
  return KVC_OK;
}

static void probe_destroy(void *instance) { free(instance); }

static void probe_needs(void *instance, kvc_policy_needs *needs) {
  const probe *p = (const probe *)instance;
  needs->stats = p->stats;
  needs->observation_window = p->window;
}

static void record(const float *source, float *target, int32_t n) {
  int32_t i;
  for (i = 0; i < n; ++i) target[i] = source ? source[i] : -1.0f;
}

static int32_t probe_score(void *instance, const kvc_score_job *jobs, size_t n_jobs,
                           kvc_plugin_error *error) {
  const probe *p = (const probe *)instance;
  size_t j;
  if (p->fail) {
    strcpy(error->message, "stats_probe was told to fail");
    return KVC_ERR_PLUGIN;
  }
  for (j = 0; j < n_jobs; ++j) {
    const kvc_score_job *job = KVC_PLUGIN_AT(const kvc_score_job, jobs, j);
    const float *by[4] = {NULL, job->attn_sum, job->attn_last, job->attn_window};
    int32_t i, n = job->n_tokens;
    if (job->layer >= PROBE_LAYERS || job->kv_head >= PROBE_HEADS || n > PROBE_TOKENS) {
      strcpy(error->message, "stats_probe: shape too large");
      return KVC_ERR_INVALID_ARGUMENT;
    }
    recorded_n[job->layer][job->kv_head] = n;
    memcpy(recorded_pos[job->layer][job->kv_head], job->pos, sizeof(int32_t) * (size_t)n);
    record(job->attn_sum, recorded[0][job->layer][job->kv_head], n);
    record(job->attn_last, recorded[1][job->layer][job->kv_head], n);
    record(job->attn_window, recorded[2][job->layer][job->kv_head], n);
    for (i = 0; i < n; ++i) {
      job->scores[i] = by[p->score_by] ? by[p->score_by][i] : (float)job->pos[i];
    }
  }
  return KVC_OK;
}

/* What the last score() saw for (layer, kv_head): which = 0 sum, 1 last, 2 window. */
EXPORT int32_t kvc_probe_read(int32_t layer, int32_t kv_head, int32_t which,
                              const int32_t **pos, const float **values) {
  *pos = recorded_pos[layer][kv_head];
  *values = recorded[which][layer][kv_head];
  return recorded_n[layer][kv_head];
}

static const kvc_policy_vtable probe_vtable = {sizeof(kvc_policy_vtable), probe_create,
                                               probe_destroy, probe_needs, probe_score, NULL};
static const kvc_plugin_descriptor probe_descriptor = {
    sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, "stats_probe", 1,
    &probe_vtable};

EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                const kvc_plugin_descriptor **out_descriptors,
                                size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &probe_descriptor;
  *out_count = 1;
  return KVC_OK;
}
