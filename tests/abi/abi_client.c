/* A C program built against a frozen copy of the public headers (tests/abi/1.0, or with
 * KVC_ABI_FIRST_RELEASE those of the first release, tests/abi/first_release) and run on this
 * library: every versioned struct it passes is followed by canary bytes, and no call, the
 * *_init functions above all, may touch them. Appends, attends (checked against a
 * double-precision reference), reads stats, params and plugin info and, with the 1.0 headers,
 * uses every other _init. Exits non-zero on the first failed check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcache/kvcache.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

#define REQUIRE_OK(expr)                                                                  \
  do {                                                                                    \
    kvc_status *st_ = (expr);                                                             \
    if (st_) {                                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr,            \
              kvc_status_code_name(kvc_status_get_code(st_)), kvc_status_message(st_));   \
      kvc_status_free(st_);                                                               \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

enum { CANARY_BYTES = 64, CANARY = 0xA5, QH = 2, D = 4, T = 3 };

/* A struct of the headers this program was built against, then canary bytes right after it
 * (a char array is placed at offset sizeof(struct), with no padding before it). */
#define GUARDED(type) \
  struct {            \
    type s;           \
    unsigned char canary[CANARY_BYTES]; \
  }

static int canary_intact(const unsigned char *canary) {
  int i;
  for (i = 0; i < CANARY_BYTES; ++i) {
    if (canary[i] != CANARY) return 0;
  }
  return 1;
}

#define ARM(g) memset(&(g), CANARY, sizeof(g))
#define INTACT(g) CHECK(canary_intact((g).canary))

/* One KV head, QH query heads: attention of query row t (positions 0..T-1, causal). */
static void reference(const float *k, const float *v, const float *q, int t, double *out) {
  int h, j, i;
  for (h = 0; h < QH; ++h) {
    double logits[T], m = -1e300, denom = 0.0;
    for (j = 0; j <= t; ++j) {
      double dot = 0.0;
      for (i = 0; i < D; ++i) dot += (double)q[(t * QH + h) * D + i] * k[j * D + i];
      logits[j] = dot / sqrt((double)D);
      if (logits[j] > m) m = logits[j];
    }
    for (i = 0; i < D; ++i) out[h * D + i] = 0.0;
    for (j = 0; j <= t; ++j) {
      const double w = exp(logits[j] - m);
      denom += w;
      for (i = 0; i < D; ++i) out[h * D + i] += w * v[j * D + i];
    }
    for (i = 0; i < D; ++i) out[h * D + i] /= denom;
  }
}

static double max_error(const float *out, const float *k, const float *v, const float *q,
                        int first, int n) {
  double expect[QH * D], err = 0.0;
  int t, i;
  for (t = first; t < first + n; ++t) {
    reference(k, v, q, t, expect);
    for (i = 0; i < QH * D; ++i) err = fmax(err, fabs(out[(t - first) * QH * D + i] - expect[i]));
  }
  return err;
}

int main(void) {
  kvc_context *ctx = NULL;
  kvc_cache *cache = NULL;
  GUARDED(kvc_cache_params) params;
  GUARDED(kvc_cache_params) read_back;
  GUARDED(kvc_attention_params) ap;
  GUARDED(kvc_cache_stats) stats;
  GUARDED(kvc_plugin_info) info;
  /* The case the issue found: the caller's positions right after its batch. */
  struct {
    kvc_batch batch;
    int32_t positions[2];
    unsigned char canary[CANARY_BYTES];
  } prefill;
  GUARDED(kvc_batch) decode;
  kvc_tensor kt, vt, qt;
  kvc_tensor_mut ot;
  float k[T * D], v[T * D], q[T * QH * D], out[T * QH * D];
  int32_t seq = 0, two = 2, one = 1, last_position = 2;
  int i;

  for (i = 0; i < T * D; ++i) {
    k[i] = (float)sin(0.37 * i + 0.2);
    v[i] = (float)cos(0.11 * i);
  }
  for (i = 0; i < T * QH * D; ++i) q[i] = (float)sin(0.05 * i + 1.0);

#ifdef KVC_ABI_FIRST_RELEASE
  REQUIRE_OK(kvc_context_create(NULL, &ctx));
#else
  REQUIRE_OK(kvc_context_create("stores:\n  local: { plugin: host }\n", &ctx));
#endif

  ARM(params);
  kvc_cache_params_init(&params.s);
  INTACT(params);
  CHECK(params.s.struct_size == sizeof params.s);
  CHECK(params.s.head_dim == 64 && params.s.block_tokens == 16 && params.s.sinks == -1);
  params.s.kv_heads = 1;
  params.s.q_heads = QH;
  params.s.head_dim = D;
  params.s.dtype = KVC_DTYPE_F32;
  params.s.block_tokens = 2;
  REQUIRE_OK(kvc_cache_create(ctx, &params.s, &cache));
  REQUIRE_OK(kvc_seq_create(cache, seq));

  ARM(prefill);
  prefill.positions[0] = 0;
  prefill.positions[1] = 1;
  kvc_batch_init(&prefill.batch, 1, &seq, &two, prefill.positions);
  CHECK(prefill.positions[0] == 0 && prefill.positions[1] == 1);
  CHECK(canary_intact(prefill.canary));
  CHECK(prefill.batch.struct_size == sizeof prefill.batch);
  ARM(ap);
  kvc_attention_params_init(&ap.s);
  INTACT(ap);
  CHECK(ap.s.struct_size == sizeof ap.s && ap.s.scale == 0.0f);

  kt.data = k; kt.dtype = KVC_DTYPE_F32; kt.device = KVC_DEVICE_HOST; kt.row_stride = 0;
  vt = kt;
  vt.data = v;
  qt = kt;
  qt.data = q;
  ot.data = out; ot.dtype = KVC_DTYPE_F32; ot.device = KVC_DEVICE_HOST; ot.row_stride = 0;
  REQUIRE_OK(kvc_append_attend(cache, 0, &prefill.batch, &qt, &kt, &vt, &ap.s, &ot));
  CHECK(max_error(out, k, v, q, 0, 2) <= 1e-5);
  CHECK(canary_intact(prefill.canary));

  /* Decode the third token with the two calls. */
  ARM(decode);
  kvc_batch_init(&decode.s, 1, &seq, &one, &last_position);
  INTACT(decode);
  kt.data = k + 2 * D;
  vt.data = v + 2 * D;
  qt.data = q + 2 * QH * D;
  REQUIRE_OK(kvc_append(cache, 0, &decode.s, &kt, &vt));
  REQUIRE_OK(kvc_attend(cache, 0, &decode.s, &qt, &ap.s, &ot));
  CHECK(max_error(out, k, v, q, 2, 1) <= 1e-5);
  INTACT(decode);

  ARM(stats);
#ifdef KVC_ABI_FIRST_RELEASE
  memset(&stats.s, 0, sizeof stats.s);
  stats.s.struct_size = sizeof stats.s;
#else
  kvc_cache_stats_init(&stats.s);
  INTACT(stats);
  CHECK(stats.s.struct_size == sizeof stats.s && stats.s.tokens_stored == 0);
#endif
  REQUIRE_OK(kvc_cache_get_stats(cache, &stats.s));
  INTACT(stats);
  CHECK(stats.s.tokens_stored == T);
  CHECK(stats.s.sequences == 1);
  CHECK(stats.s.bytes_limit == params.s.memory_limit);

  ARM(read_back);
  read_back.s.struct_size = sizeof read_back.s;
  REQUIRE_OK(kvc_cache_get_params(cache, &read_back.s));
  INTACT(read_back);
  CHECK(read_back.s.q_heads == QH && read_back.s.head_dim == D && read_back.s.block_tokens == 2);

  CHECK(kvc_context_plugin_count(ctx) >= 1);
  ARM(info);
  info.s.struct_size = sizeof info.s;
  REQUIRE_OK(kvc_context_plugin_info(ctx, 0, &info.s));
  INTACT(info);
  CHECK(info.s.name != NULL && info.s.path != NULL);

#ifndef KVC_ABI_FIRST_RELEASE
  {
    GUARDED(kvc_policy_info) policy;
    GUARDED(kvc_estimate_request) request;
    GUARDED(kvc_prefix) prefix;
    kvc_cache_params with_policy = params.s;
    kvc_cache *compressing = NULL;
    int32_t tokens[4] = {5, 6, 7, 8}, saved = -1, restored = -1, length = -1;
    size_t estimate = 0, peak = 0;

    with_policy.policy = "window";
    with_policy.budget = 8;
    with_policy.recent = 2;
    REQUIRE_OK(kvc_cache_create(ctx, &with_policy, &compressing));
    ARM(policy);
    kvc_policy_info_init(&policy.s);
    INTACT(policy);
    CHECK(policy.s.struct_size == sizeof policy.s && policy.s.name == NULL);
    REQUIRE_OK(kvc_cache_policy_info(compressing, &policy.s));
    INTACT(policy);
    CHECK(policy.s.name != NULL && strcmp(policy.s.name, "window") == 0);
    CHECK(policy.s.budget_tokens == 8 && policy.s.recent == 2);

    ARM(request);
    kvc_estimate_request_init(&request.s, 100, 10, 20);
    INTACT(request);
    CHECK(request.s.struct_size == sizeof request.s && request.s.marks_prompt_end == 0);
    REQUIRE_OK(kvc_cache_estimate(compressing, &request.s, &estimate));
    REQUIRE_OK(kvc_cache_estimate_peak_bytes(compressing, 100, 10, 20, &peak));
    CHECK(estimate == peak && estimate > 0);
    kvc_cache_destroy(compressing);

    ARM(prefix);
    kvc_prefix_init(&prefix.s, "abi-client-model", tokens, 2);
    INTACT(prefix);
    CHECK(prefix.s.struct_size == sizeof prefix.s && prefix.s.chunk_tokens == 256);
    prefix.s.chunk_tokens = 2;
    REQUIRE_OK(kvc_prefix_save(cache, seq, "local", &prefix.s, &saved));
    CHECK(saved == 2);
    REQUIRE_OK(kvc_prefix_load(cache, 7, "local", &prefix.s, &restored));
    CHECK(restored == 2);
    REQUIRE_OK(kvc_seq_length(cache, 7, 0, 0, &length));
    CHECK(length == 2);
    INTACT(prefix);
  }
#endif

  kvc_cache_destroy(cache);
  kvc_context_destroy(ctx);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
