/* The C API from a C99 program: context, cache, sequences, append, attend (checked against a
 * naive reference), stats and an error path. Exits non-zero on the first failed check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache/kvcache.h"

static int failures = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

/* Requires success; prints the status otherwise and stops. */
#define REQUIRE_OK(expr)                                                     \
  do {                                                                       \
    kvc_status *st_ = (expr);                                                \
    if (st_) {                                                               \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr, \
              kvc_status_code_name(kvc_status_get_code(st_)), kvc_status_message(st_)); \
      kvc_status_free(st_);                                                  \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

enum { KVH = 2, QH = 4, D = 8, N = 5 };

/* Naive attention of one query token (QH heads) over n stored tokens at positions 0..n-1. */
static void reference(const float *k, const float *v, int n, const float *q, int p, double *out) {
  int h, t, i;
  for (h = 0; h < QH; ++h) {
    const int g = h / (QH / KVH);
    double logits[N], m = -1e300, denom = 0.0;
    for (t = 0; t < n && t <= p; ++t) {
      double dot = 0.0;
      for (i = 0; i < D; ++i) dot += (double)q[h * D + i] * k[(t * KVH + g) * D + i];
      logits[t] = dot / sqrt((double)D);
      if (logits[t] > m) m = logits[t];
    }
    for (i = 0; i < D; ++i) out[h * D + i] = 0.0;
    for (t = 0; t < n && t <= p; ++t) {
      const double w = exp(logits[t] - m);
      denom += w;
      for (i = 0; i < D; ++i) out[h * D + i] += w * v[(t * KVH + g) * D + i];
    }
    for (i = 0; i < D; ++i) out[h * D + i] /= denom;
  }
}

int main(void) {
  kvc_context *ctx = NULL;
  kvc_cache *cache = NULL;
  kvc_cache_params params;
  kvc_cache_stats stats;
  kvc_batch batch;
  kvc_attention_params ap;
  kvc_tensor kt, vt, qt;
  kvc_tensor_mut ot;
  kvc_status *st;
  float k[N * KVH * D], v[N * KVH * D], q[N * QH * D], out[N * QH * D];
  int32_t positions[N], seq = 1, n = N, length = -1;
  double expect[QH * D], err = 0.0;
  int i, t;

  CHECK(kvc_version() == KVC_VERSION_NUMBER);
  CHECK(kvc_status_get_code(NULL) == KVC_OK);
  kvc_context_destroy(NULL);
  kvc_cache_destroy(NULL);
  kvc_status_free(NULL);

  REQUIRE_OK(kvc_context_create(NULL, &ctx));
  CHECK(ctx != NULL);
  CHECK(kvc_context_plugin_count(ctx) >= 1);

  kvc_cache_params_init(&params);
  CHECK(params.struct_size == sizeof params);
  params.layers = 2;
  params.kv_heads = KVH;
  params.q_heads = QH;
  params.head_dim = D;
  params.dtype = KVC_DTYPE_F32;
  params.layout = KVC_LAYOUT_PAGED;
  params.block_tokens = 2;
  REQUIRE_OK(kvc_cache_create(ctx, &params, &cache));
  REQUIRE_OK(kvc_seq_create(cache, seq));

  for (i = 0; i < N * KVH * D; ++i) {
    k[i] = (float)sin(0.37 * i);
    v[i] = (float)cos(0.11 * i);
  }
  for (i = 0; i < N * QH * D; ++i) q[i] = (float)sin(0.05 * i + 1.0);
  for (i = 0; i < N; ++i) positions[i] = i;

  kvc_batch_init(&batch, 1, &seq, &n, positions);
  kt.data = k; kt.dtype = KVC_DTYPE_F32; kt.device = KVC_DEVICE_HOST; kt.row_stride = 0;
  vt = kt;
  vt.data = v;
  qt = kt;
  qt.data = q;
  ot.data = out; ot.dtype = KVC_DTYPE_F32; ot.device = KVC_DEVICE_HOST; ot.row_stride = 0;
  kvc_attention_params_init(&ap);

  /* Layer 1: append then attend. Layer 0: both in one call. */
  REQUIRE_OK(kvc_append(cache, 1, &batch, &kt, &vt));
  REQUIRE_OK(kvc_attend(cache, 1, &batch, &qt, &ap, &ot));
  for (t = 0; t < N; ++t) {
    reference(k, v, N, q + t * QH * D, t, expect);
    for (i = 0; i < QH * D; ++i) err = fmax(err, fabs(out[t * QH * D + i] - expect[i]));
  }
  CHECK(err <= 1e-5);
  memset(out, 0, sizeof out);
  REQUIRE_OK(kvc_append_attend(cache, 0, &batch, &qt, &kt, &vt, &ap, &ot));
  err = 0.0;
  for (t = 0; t < N; ++t) {
    reference(k, v, N, q + t * QH * D, t, expect);
    for (i = 0; i < QH * D; ++i) err = fmax(err, fabs(out[t * QH * D + i] - expect[i]));
  }
  CHECK(err <= 1e-5);

  REQUIRE_OK(kvc_seq_length(cache, seq, 1, 1, &length));
  CHECK(length == N);

  memset(&stats, 0xAB, sizeof stats);
  kvc_cache_stats_init(&stats);
  CHECK(stats.struct_size == sizeof stats);
  CHECK(stats.tokens_stored == 0);
  REQUIRE_OK(kvc_cache_get_stats(cache, &stats));
  CHECK(stats.tokens_stored == (uint64_t)(N * KVH * 2));
  CHECK(stats.sequences == 1);
  CHECK(stats.bytes_used > 0);
  CHECK(stats.bytes_peak >= stats.bytes_used);
  CHECK(stats.bytes_limit == params.memory_limit);

  /* Error path: a duplicate sequence id. */
  st = kvc_seq_create(cache, seq);
  CHECK(st != NULL);
  CHECK(kvc_status_get_code(st) == KVC_ERR_ALREADY_EXISTS);
  CHECK(strlen(kvc_status_message(st)) > 0);
  CHECK(strcmp(kvc_status_code_name(kvc_status_get_code(st)), "ALREADY_EXISTS") == 0);
  kvc_status_free(st);

  /* Error path: an unknown sequence leaves the out-parameter alone. */
  length = -1;
  st = kvc_seq_length(cache, 99, 0, 0, &length);
  CHECK(kvc_status_get_code(st) == KVC_ERR_NOT_FOUND);
  CHECK(length == -1);
  kvc_status_free(st);

  /* Dtype helpers, and values this library does not know. */
  CHECK(kvc_dtype_size(KVC_DTYPE_F32) == 4);
  CHECK(kvc_dtype_size(KVC_DTYPE_BF16) == 2);
  CHECK(strcmp(kvc_dtype_name(KVC_DTYPE_F16), "f16") == 0);
  CHECK(kvc_dtype_size((kvc_dtype)17) == 0);
  CHECK(strcmp(kvc_dtype_name((kvc_dtype)17), "unknown") == 0);

  /* Policy info: this cache has no policy; misuse is refused and changes nothing. */
  {
    kvc_policy_info info;
    kvc_policy_info_init(&info);
    CHECK(info.struct_size == sizeof info);
    CHECK(info.name == NULL);
    st = kvc_cache_policy_info(cache, &info);
    CHECK(kvc_status_get_code(st) == KVC_ERR_NOT_FOUND);
    CHECK(info.name == NULL);
    kvc_status_free(st);
    st = kvc_cache_policy_info(NULL, &info);
    CHECK(kvc_status_get_code(st) == KVC_ERR_INVALID_ARGUMENT);
    kvc_status_free(st);
    st = kvc_cache_policy_info(cache, NULL);
    CHECK(kvc_status_get_code(st) == KVC_ERR_INVALID_ARGUMENT);
    kvc_status_free(st);
    info.struct_size = 0;
    st = kvc_cache_policy_info(cache, &info);
    CHECK(kvc_status_get_code(st) == KVC_ERR_INVALID_ARGUMENT);
    kvc_status_free(st);
  }
  {
    kvc_cache_params with_policy = params;
    kvc_cache *compressing = NULL;
    kvc_policy_info info;
    with_policy.policy = "window";
    with_policy.budget = 8;
    with_policy.recent = 2;
    REQUIRE_OK(kvc_cache_create(ctx, &with_policy, &compressing));
    kvc_policy_info_init(&info);
    REQUIRE_OK(kvc_cache_policy_info(compressing, &info));
    CHECK(info.name != NULL && strcmp(info.name, "window") == 0);
    CHECK(info.budget_tokens == 8);
    CHECK(info.sinks == 0);
    CHECK(info.recent == 2);
    kvc_cache_destroy(compressing);
  }

  /* Error path: enum values this library does not know (legal C, from an FFI caller). */
  CHECK(kvc_status_code_name((kvc_status_code)999) != NULL);
  {
    kvc_cache_params bad = params;
    kvc_cache *never = NULL;
    bad.dtype = (kvc_dtype)17;
    st = kvc_cache_create(ctx, &bad, &never);
    CHECK(kvc_status_get_code(st) == KVC_ERR_INVALID_ARGUMENT);
    CHECK(never == NULL);
    kvc_status_free(st);
    bad = params;
    bad.layout = (kvc_layout)9;
    st = kvc_cache_create(ctx, &bad, &never);
    CHECK(kvc_status_get_code(st) == KVC_ERR_INVALID_ARGUMENT);
    CHECK(never == NULL);
    kvc_status_free(st);
  }
  {
    kvc_tensor bad_k = kt;
    bad_k.dtype = (kvc_dtype)42;
    st = kvc_append(cache, 0, &batch, &bad_k, &vt);
    CHECK(kvc_status_get_code(st) == KVC_ERR_INVALID_ARGUMENT);
    kvc_status_free(st);
    REQUIRE_OK(kvc_seq_length(cache, seq, 0, 0, &length));
    CHECK(length == N);
  }

  REQUIRE_OK(kvc_seq_remove(cache, seq));
  REQUIRE_OK(kvc_cache_get_stats(cache, &stats));
  CHECK(stats.tokens_stored == 0);
  CHECK(stats.bytes_used == 0);

  kvc_cache_destroy(cache);
  kvc_context_destroy(ctx);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_only: all checks passed\n");
  return 0;
}
