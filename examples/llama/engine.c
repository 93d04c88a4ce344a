/*
 * The forward pass. For a batch of T tokens (all sequences' new tokens concatenated):
 *
 *   x = embedding rows
 *   per layer l:
 *     xb = RMSNorm(x) * rms_att[l]
 *     Q = xb Wq^T, K = xb Wk^T, V = xb Wv^T            (one sgemm each, all T rows)
 *     RoPE on Q and K (pairs (2i, 2i+1) of each head, angle = pos * theta^(-2i/head_dim))
 *     att = kvcache append-and-attend of layer l        (stores K/V, causal GQA attention)
 *     x += att Wo^T
 *     xb = RMSNorm(x) * rms_ffn[l]
 *     x += (silu(xb W1^T) * (xb W3^T)) W2^T
 *   logits = (RMSNorm(x) * rms_final) Wcls^T           (only for the rows asked for)
 *
 * The engine keeps no K/V of its own: the cache stores them and computes all attention.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct kvl_engine {
  const kvl_model *model;
  kvc_cache *cache;
  int32_t max_tokens;
  kvl_products *products;
  float *x;         /* [max, dim] residual stream */
  float *xb;        /* [max, dim] normalised activations */
  float *q;         /* [max, dim] queries, [max, n_heads, head_dim] */
  float *k;         /* [max, kv_dim] keys, [max, n_kv_heads, head_dim] */
  float *v;         /* [max, kv_dim] values */
  float *att;       /* [max, dim] attention output */
  float *hb;        /* [max, hidden_dim] */
  float *hb2;       /* [max, hidden_dim] */
  float *rope;      /* [head_dim / 2] cos, [head_dim / 2] sin of one token */
  double *inv_freq; /* [head_dim / 2] theta^(-2i / head_dim) */
};

/* The activation buffers, sized in one place for kvl_engine_create and
 * kvl_engine_activation_bytes. */
enum {
  BUF_X, BUF_XB, BUF_Q, BUF_K, BUF_V, BUF_ATT, BUF_HB, BUF_HB2, BUF_ROPE, BUF_INV_FREQ, BUF_COUNT
};

/* a * b * c, or 0 when it overflows size_t. */
static size_t product(size_t a, size_t b, size_t c) {
  if (b != 0 && a > SIZE_MAX / b) return 0;
  if (c != 0 && a * b > SIZE_MAX / c) return 0;
  return a * b * c;
}

/* Bytes of each buffer for steps of `tokens` tokens; 0 when one overflows size_t. */
static int buffer_bytes(const kvl_model *m, size_t tokens, size_t bytes[BUF_COUNT]) {
  const size_t dim = (size_t)m->config.dim, kv_dim = (size_t)m->kv_dim;
  const size_t hidden = (size_t)m->config.hidden_dim, half = (size_t)(m->head_dim / 2);
  int i;
  bytes[BUF_X] = product(tokens, dim, sizeof(float));
  bytes[BUF_XB] = bytes[BUF_X];
  bytes[BUF_Q] = bytes[BUF_X];
  bytes[BUF_K] = product(tokens, kv_dim, sizeof(float));
  bytes[BUF_V] = bytes[BUF_K];
  bytes[BUF_ATT] = bytes[BUF_X];
  bytes[BUF_HB] = product(tokens, hidden, sizeof(float));
  bytes[BUF_HB2] = bytes[BUF_HB];
  bytes[BUF_ROPE] = product(2, half, sizeof(float));
  bytes[BUF_INV_FREQ] = product(1, half, sizeof(double));
  for (i = 0; i < BUF_COUNT; ++i) {
    if (bytes[i] == 0) return 0;
  }
  return 1;
}

size_t kvl_engine_activation_bytes(const kvl_model *model, int32_t max_batch_tokens) {
  size_t bytes[BUF_COUNT], total = 0;
  int i;
  if (model == NULL || max_batch_tokens < 1 ||
      !buffer_bytes(model, (size_t)max_batch_tokens, bytes)) {
    return 0;
  }
  for (i = 0; i < BUF_COUNT; ++i) {
    if (total > SIZE_MAX - bytes[i]) return 0;
    total += bytes[i];
  }
  {
    const size_t products = kvl_products_buffer_bytes(model, max_batch_tokens);
    if (total > SIZE_MAX - products) return 0;
    return total + products;
  }
}

void kvl_engine_free(kvl_engine *e) {
  if (e == NULL) return;
  kvl_products_free(e->products);
  free(e->x);
  free(e->xb);
  free(e->q);
  free(e->k);
  free(e->v);
  free(e->att);
  free(e->hb);
  free(e->hb2);
  free(e->rope);
  free(e->inv_freq);
  free(e);
}

int kvl_engine_create(const kvl_model *model, kvc_cache *cache, int32_t max_batch_tokens,
                      kvl_engine **out_engine, char *error, size_t error_size) {
  kvc_cache_params p;
  kvl_engine *e;
  size_t bytes[BUF_COUNT];
  int32_t i;
  if (model == NULL || cache == NULL || out_engine == NULL) {
    return kvl_fail(error, error_size,
                    "kvl_engine_create: model, cache and out_engine must not be NULL");
  }
  if (max_batch_tokens < 1) {
    return kvl_fail(error, error_size, "kvl_engine_create: max_batch_tokens must be >= 1, got %d",
                    (int)max_batch_tokens);
  }
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  if (kvl_fail_status(kvc_cache_get_params(cache, &p), error, error_size,
                      "kvl_engine_create: kvc_cache_get_params") != 0) {
    return -1;
  }
  if (p.layers != model->config.n_layers || p.kv_heads != model->config.n_kv_heads ||
      p.q_heads != model->config.n_heads || p.head_dim != model->head_dim) {
    return kvl_fail(error, error_size,
                    "kvl_engine_create: the cache's shape (layers %d, kv_heads %d, q_heads %d, "
                    "head_dim %d) does not match the model's (layers %d, kv_heads %d, q_heads %d, "
                    "head_dim %d); fill the cache params with kvl_cache_params_for()",
                    (int)p.layers, (int)p.kv_heads, (int)p.q_heads, (int)p.head_dim,
                    (int)model->config.n_layers, (int)model->config.n_kv_heads,
                    (int)model->config.n_heads, (int)model->head_dim);
  }
  e = (kvl_engine *)calloc(1, sizeof *e);
  if (e == NULL) return kvl_fail(error, error_size, "kvl_engine_create: out of host memory");
  e->model = model;
  e->cache = cache;
  e->max_tokens = max_batch_tokens;
  if (buffer_bytes(model, (size_t)max_batch_tokens, bytes)) {
    e->x = (float *)malloc(bytes[BUF_X]);
    e->xb = (float *)malloc(bytes[BUF_XB]);
    e->q = (float *)malloc(bytes[BUF_Q]);
    e->k = (float *)malloc(bytes[BUF_K]);
    e->v = (float *)malloc(bytes[BUF_V]);
    e->att = (float *)malloc(bytes[BUF_ATT]);
    e->hb = (float *)malloc(bytes[BUF_HB]);
    e->hb2 = (float *)malloc(bytes[BUF_HB2]);
    e->rope = (float *)malloc(bytes[BUF_ROPE]);
    e->inv_freq = (double *)malloc(bytes[BUF_INV_FREQ]);
  }
  if (!e->x || !e->xb || !e->q || !e->k || !e->v || !e->att || !e->hb || !e->hb2 || !e->rope ||
      !e->inv_freq) {
    kvl_engine_free(e);
    return kvl_fail(error, error_size,
                    "kvl_engine_create: out of host memory for %d tokens of activations",
                    (int)max_batch_tokens);
  }
  if (kvl_products_create(model, max_batch_tokens, &e->products, error, error_size) != 0) {
    kvl_engine_free(e);
    return -1;
  }
  for (i = 0; i < model->head_dim / 2; ++i) {
    e->inv_freq[i] = pow((double)model->config.rope_theta, -(double)(2 * i) / model->head_dim);
  }
  *out_engine = e;
  return 0;
}

static void rmsnorm(float *out, const float *x, const float *weight, int32_t dim, float eps) {
  double ss = 0.0;
  float scale;
  int32_t i;
  for (i = 0; i < dim; ++i) ss += (double)x[i] * x[i];
  scale = (float)(1.0 / sqrt(ss / dim + eps));
  for (i = 0; i < dim; ++i) out[i] = weight[i] * (scale * x[i]);
}

/* Rotates consecutive pairs of each head of `row` ([heads, head_dim]) by the token's angles. */
static void rotate(float *row, int32_t heads, int32_t head_dim, const float *cos_,
                   const float *sin_) {
  int32_t h, i;
  for (h = 0; h < heads; ++h) {
    float *v = row + (size_t)h * head_dim;
    for (i = 0; i < head_dim / 2; ++i) {
      float v0 = v[2 * i], v1 = v[2 * i + 1];
      v[2 * i] = v0 * cos_[i] - v1 * sin_[i];
      v[2 * i + 1] = v0 * sin_[i] + v1 * cos_[i];
    }
  }
}

static void apply_rope(kvl_engine *e, int32_t total, const int32_t *positions) {
  const kvl_model *m = e->model;
  const int32_t half = m->head_dim / 2;
  float *cos_ = e->rope, *sin_ = e->rope + half;
  int32_t t, i;
  for (t = 0; t < total; ++t) {
    for (i = 0; i < half; ++i) {
      double angle = (double)positions[t] * e->inv_freq[i];
      cos_[i] = (float)cos(angle);
      sin_[i] = (float)sin(angle);
    }
    rotate(e->q + (size_t)t * m->config.dim, m->config.n_heads, m->head_dim, cos_, sin_);
    rotate(e->k + (size_t)t * m->kv_dim, m->config.n_kv_heads, m->head_dim, cos_, sin_);
  }
}

/* Says where a forward pass failed and what it left stored: layers [0, stored) already hold
 * the batch's tokens. */
static void describe_failure(char *what, size_t size, const char *failed, int32_t stored) {
  if (stored == 0) {
    snprintf(what, size, "kvl_engine_forward: %s (nothing was stored)", failed);
  } else {
    snprintf(what, size,
             "kvl_engine_forward: %s (layers 0..%d already store this batch's tokens; remove its "
             "sequences)",
             failed, (int)stored - 1);
  }
}

static int product_failed(int32_t layer, int32_t stored, char *error, size_t error_size) {
  char failed[64], what[192];
  snprintf(failed, sizeof failed, "a matrix product failed in layer %d", (int)layer);
  describe_failure(what, sizeof what, failed, stored);
  return kvl_fail(error, error_size, "%s", what);
}

int kvl_engine_forward(kvl_engine *e, int32_t n_seqs, const int32_t *seq_ids,
                       const int32_t *n_tokens, const int32_t *tokens, const int32_t *positions,
                       int all_logits, float *logits, char *error, size_t error_size) {
  return kvl_engine_forward_marked(e, n_seqs, seq_ids, n_tokens, tokens, positions, NULL,
                                   all_logits, logits, error, error_size);
}

int kvl_engine_forward_marked(kvl_engine *e, int32_t n_seqs, const int32_t *seq_ids,
                              const int32_t *n_tokens, const int32_t *tokens,
                              const int32_t *positions, const int32_t *prompt_end, int all_logits,
                              float *logits, char *error, size_t error_size) {
  const kvl_model *m;
  const kvl_config *c;
  int64_t total64 = 0;
  int32_t total, i, t, l, out_rows;
  size_t dim, hidden;
  kvc_batch batch;
  kvc_attention_params attention;
  kvc_tensor tq, tk, tv;
  kvc_tensor_mut tout;
  const kvl_matrix *classifier;

  if (e == NULL || seq_ids == NULL || n_tokens == NULL || tokens == NULL || positions == NULL ||
      logits == NULL) {
    return kvl_fail(error, error_size, "kvl_engine_forward: NULL argument");
  }
  m = e->model;
  c = &m->config;
  dim = (size_t)c->dim;
  hidden = (size_t)c->hidden_dim;
  classifier = m->matrices + (size_t)c->n_layers * KVL_LAYER_MATRICES;
  if (n_seqs < 1) {
    return kvl_fail(error, error_size, "kvl_engine_forward: n_seqs must be >= 1, got %d",
                    (int)n_seqs);
  }
  for (i = 0; i < n_seqs; ++i) {
    if (n_tokens[i] < 1) {
      return kvl_fail(error, error_size, "kvl_engine_forward: n_tokens[%d] must be >= 1, got %d",
                      (int)i, (int)n_tokens[i]);
    }
    total64 += n_tokens[i];
  }
  if (total64 > e->max_tokens) {
    return kvl_fail(error, error_size,
                    "kvl_engine_forward: the batch has %lld tokens, more than the engine's "
                    "max_batch_tokens (%d)",
                    (long long)total64, (int)e->max_tokens);
  }
  total = (int32_t)total64;
  for (t = 0; t < total; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c->vocab_size) {
      return kvl_fail(error, error_size,
                      "kvl_engine_forward: tokens[%d] = %d is outside the vocabulary 0..%d", (int)t,
                      (int)tokens[t], (int)c->vocab_size - 1);
    }
    if (positions[t] < 0) {
      return kvl_fail(error, error_size, "kvl_engine_forward: positions[%d] = %d is negative",
                      (int)t, (int)positions[t]);
    }
  }
  /* Unknown sequences fail here, before any layer stores anything. */
  for (i = 0; i < n_seqs; ++i) {
    int32_t length;
    char what[96];
    snprintf(what, sizeof what, "kvl_engine_forward: sequence %d", (int)seq_ids[i]);
    if (kvl_fail_status(kvc_seq_length(e->cache, seq_ids[i], 0, 0, &length), error, error_size,
                        what) != 0) {
      return -1;
    }
  }

  /* Every product's oneDNN primitives exist before the first layer stores anything. */
  out_rows = all_logits ? total : n_seqs;
  for (i = 0; i < KVL_LAYER_MATRICES; ++i) {
    if (kvl_products_prepare(e->products, total, &m->matrices[i], error, error_size) != 0) {
      return -1;
    }
  }
  if (kvl_products_prepare(e->products, out_rows, classifier, error, error_size) != 0) return -1;

  for (t = 0; t < total; ++t) {
    memcpy(e->x + (size_t)t * dim, m->token_embedding + (size_t)tokens[t] * dim,
           dim * sizeof(float));
  }
  kvc_batch_init(&batch, n_seqs, seq_ids, n_tokens, positions);
  batch.prompt_end = prompt_end;
  kvc_attention_params_init(&attention);
  memset(&tq, 0, sizeof tq);
  tq.data = e->q;
  tq.dtype = KVC_DTYPE_F32;
  tq.device = KVC_DEVICE_HOST;
  tk = tq;
  tk.data = e->k;
  tv = tq;
  tv.data = e->v;
  memset(&tout, 0, sizeof tout);
  tout.data = e->att;
  tout.dtype = KVC_DTYPE_F32;
  tout.device = KVC_DEVICE_HOST;

  for (l = 0; l < c->n_layers; ++l) {
    const kvl_matrix *w = m->matrices + (size_t)l * KVL_LAYER_MATRICES;
    kvc_status *status;
    for (t = 0; t < total; ++t) {
      rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, m->rms_att + (size_t)l * dim, c->dim,
              c->norm_eps);
    }
    if (kvl_product(e->products, &w[KVL_WQ], e->q, e->xb, total, 0.0f) != 0 ||
        kvl_product(e->products, &w[KVL_WK], e->k, e->xb, total, 0.0f) != 0 ||
        kvl_product(e->products, &w[KVL_WV], e->v, e->xb, total, 0.0f) != 0) {
      return product_failed(l, l, error, error_size);
    }
    apply_rope(e, total, positions);

    kvl_products_rest(e->products);
    status = kvc_append_attend(e->cache, l, &batch, &tq, &tk, &tv, &attention, &tout);
    if (status != NULL) {
      char failed[32], what[192];
      snprintf(failed, sizeof failed, "layer %d", (int)l);
      describe_failure(what, sizeof what, failed, l);
      return kvl_fail_status(status, error, error_size, what);
    }
    if (kvl_product(e->products, &w[KVL_WO], e->x, e->att, total, 1.0f) != 0) {
      return product_failed(l, l + 1, error, error_size);
    }

    for (t = 0; t < total; ++t) {
      rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, m->rms_ffn + (size_t)l * dim, c->dim,
              c->norm_eps);
    }
    if (kvl_product(e->products, &w[KVL_W1], e->hb, e->xb, total, 0.0f) != 0 ||
        kvl_product(e->products, &w[KVL_W3], e->hb2, e->xb, total, 0.0f) != 0) {
      return product_failed(l, l + 1, error, error_size);
    }
    {
      const size_t n = (size_t)total * hidden;
      size_t j;
      for (j = 0; j < n; ++j) {
        float a = e->hb[j];
        e->hb[j] = a / (1.0f + expf(-a)) * e->hb2[j];
      }
    }
    if (kvl_product(e->products, &w[KVL_W2], e->x, e->hb, total, 1.0f) != 0) {
      return product_failed(l, l + 1, error, error_size);
    }
  }

  if (all_logits) {
    for (t = 0; t < total; ++t) {
      rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, m->rms_final, c->dim, c->norm_eps);
    }
  } else {
    int32_t last = -1;
    for (i = 0; i < n_seqs; ++i) {
      last += n_tokens[i];
      rmsnorm(e->xb + (size_t)i * dim, e->x + (size_t)last * dim, m->rms_final, c->dim,
              c->norm_eps);
    }
  }
  if (kvl_product(e->products, classifier, logits, e->xb, out_rows, 0.0f) != 0) {
    return product_failed(c->n_layers, c->n_layers, error, error_size);
  }
  kvl_products_rest(e->products);
  return 0;
}
