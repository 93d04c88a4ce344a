/*
 * Model weights: llama2.c "version 0" checkpoints and reproducible random models.
 *
 * A version 0 checkpoint is seven int32 header fields (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len) followed by fp32 weights in llama2.c's run.c order: token
 * embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, two unused RoPE tables
 * of seq_len * head_dim / 2 floats each, and the classifier when vocab_size is negative
 * (a positive vocab_size means the classifier is the token embedding).
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "internal.h"

/* Each dimension stays below this so that products of two fit easily in 64 bits and any one
 * matrix row stays addressable with int32 counts in BLAS calls. */
#define KVL_MAX_DIM (1 << 24)

enum { HEADER_INTS = 7 };

typedef struct layout {
  uint64_t emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, wcls;
  uint64_t stored;  /* floats kept in memory: everything but freq_cis */
  uint64_t in_file; /* floats in a version 0 file */
} layout;

int kvl_model_check_config(const kvl_config *c, const char *source, char *error,
                           size_t error_size) {
  const struct {
    const char *name;
    int32_t value;
  } dims[] = {{"dim", c->dim},         {"hidden_dim", c->hidden_dim}, {"n_layers", c->n_layers},
              {"n_heads", c->n_heads}, {"n_kv_heads", c->n_kv_heads}, {"vocab_size", c->vocab_size},
              {"seq_len", c->seq_len}};
  size_t i;
  for (i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
    if (dims[i].value <= 0) {
      return kvl_fail(error, error_size, "%s: %s must be > 0, got %d", source, dims[i].name,
                      (int)dims[i].value);
    }
    if (dims[i].value > KVL_MAX_DIM) {
      return kvl_fail(error, error_size, "%s: %s must be <= %d, got %d", source, dims[i].name,
                      KVL_MAX_DIM, (int)dims[i].value);
    }
  }
  if (c->n_heads % c->n_kv_heads != 0) {
    return kvl_fail(error, error_size, "%s: n_heads (%d) is not a multiple of n_kv_heads (%d)",
                    source, (int)c->n_heads, (int)c->n_kv_heads);
  }
  if (c->dim % c->n_heads != 0) {
    return kvl_fail(error, error_size, "%s: dim (%d) is not divisible by n_heads (%d)", source,
                    (int)c->dim, (int)c->n_heads);
  }
  if ((c->dim / c->n_heads) % 2 != 0) {
    return kvl_fail(error, error_size,
                    "%s: head_dim = dim / n_heads = %d is odd; RoPE rotates pairs of elements",
                    source, (int)(c->dim / c->n_heads));
  }
  if (!(c->rope_theta > 0.0f)) {
    return kvl_fail(error, error_size, "%s: rope_theta must be > 0, got %g", source,
                    (double)c->rope_theta);
  }
  if (!(c->norm_eps > 0.0f)) {
    return kvl_fail(error, error_size, "%s: norm_eps must be > 0, got %g", source,
                    (double)c->norm_eps);
  }
  if (c->shared_classifier != 0 && c->shared_classifier != 1) {
    return kvl_fail(error, error_size, "%s: shared_classifier must be 0 or 1, got %d", source,
                    (int)c->shared_classifier);
  }
  return 0;
}

/* Sizes in floats; the dimensions are checked, so no product overflows 64 bits. */
static layout layout_of(const kvl_config *c) {
  layout l;
  const uint64_t d = (uint64_t)c->dim, h = (uint64_t)c->hidden_dim, n = (uint64_t)c->n_layers;
  const uint64_t hd = d / (uint64_t)c->n_heads, kv = hd * (uint64_t)c->n_kv_heads;
  const uint64_t v = (uint64_t)c->vocab_size;
  l.emb = v * d;
  l.rms_att = n * d;
  l.wq = n * d * d;
  l.wk = n * kv * d;
  l.wv = n * kv * d;
  l.wo = n * d * d;
  l.rms_ffn = n * d;
  l.w1 = n * h * d;
  l.w2 = n * d * h;
  l.w3 = n * h * d;
  l.rms_final = d;
  l.freq_cis = (uint64_t)c->seq_len * hd; /* real and imaginary halves */
  l.wcls = c->shared_classifier ? 0 : v * d;
  l.stored = l.emb + l.rms_att + l.wq + l.wk + l.wv + l.wo + l.rms_ffn + l.w1 + l.w2 + l.w3 +
             l.rms_final + l.wcls;
  l.in_file = l.stored + l.freq_cis;
  return l;
}

/* Allocates a model with storage for `stored` floats and sets its views. */
int kvl_model_allocate(const kvl_config *config, kvl_model **out, char *error, size_t error_size) {
  layout l = layout_of(config);
  kvl_model *m;
  float *p;
  if (l.stored > (uint64_t)SIZE_MAX / sizeof(float)) {
    return kvl_fail(error, error_size, "model of %llu weights does not fit in memory",
                    (unsigned long long)l.stored);
  }
  m = (kvl_model *)calloc(1, sizeof *m);
  if (m == NULL) return kvl_fail(error, error_size, "out of host memory");
  m->storage = (float *)malloc((size_t)l.stored * sizeof(float));
  if (m->storage == NULL) {
    free(m);
    return kvl_fail(error, error_size, "out of host memory allocating %llu bytes of weights",
                    (unsigned long long)(l.stored * sizeof(float)));
  }
  m->config = *config;
  m->head_dim = config->dim / config->n_heads;
  m->kv_dim = m->head_dim * config->n_kv_heads;
  p = m->storage;
  m->token_embedding = p, p += l.emb;
  m->rms_att = p, p += l.rms_att;
  m->wq = p, p += l.wq;
  m->wk = p, p += l.wk;
  m->wv = p, p += l.wv;
  m->wo = p, p += l.wo;
  m->rms_ffn = p, p += l.rms_ffn;
  m->w1 = p, p += l.w1;
  m->w2 = p, p += l.w2;
  m->w3 = p, p += l.w3;
  m->rms_final = p, p += l.rms_final;
  m->wcls = config->shared_classifier ? m->token_embedding : p;
  m->bos = 1; /* llama2.c's convention */
  m->eos = 2;
  *out = m;
  return 0;
}

/* Reads n floats; fread in pieces so that very large tensors need no single huge call. */
static int read_floats(FILE *f, float *dst, uint64_t n) {
  const uint64_t piece = (uint64_t)1 << 26;
  while (n > 0) {
    size_t want = (size_t)(n < piece ? n : piece);
    if (fread(dst, sizeof(float), want, f) != want) return -1;
    dst += want;
    n -= want;
  }
  return 0;
}

int kvl_model_load(const char *path, kvl_model **out_model, char *error, size_t error_size) {
  FILE *f;
  int32_t header[HEADER_INTS];
  kvl_config c;
  layout l;
  long file_size;
  uint64_t expected;
  kvl_model *m = NULL;

  if (path == NULL || out_model == NULL) {
    return kvl_fail(error, error_size, "kvl_model_load: path and out_model must not be NULL");
  }
  if (kvl_gguf_is_gguf(path)) return kvl_model_load_gguf(path, out_model, error, error_size);
  f = fopen(path, "rb");
  if (f == NULL) return kvl_fail(error, error_size, "%s: cannot open: %s", path, strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0 || (file_size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return kvl_fail(error, error_size, "%s: cannot determine the file size", path);
  }
  if ((uint64_t)file_size < sizeof header) {
    fclose(f);
    return kvl_fail(error, error_size,
                    "%s: short file: %ld bytes, a llama2.c checkpoint header needs %u", path,
                    file_size, (unsigned)sizeof header);
  }
  if (fread(header, sizeof header, 1, f) != 1) {
    fclose(f);
    return kvl_fail(error, error_size, "%s: cannot read the header", path);
  }
  if ((uint32_t)header[0] == 0x616b3432u) { /* "ak42": llama2.c export.py version >= 1 */
    fclose(f);
    return kvl_fail(error, error_size,
                    "%s: bad header: this is a llama2.c version 1+ checkpoint (magic 'ak42'); "
                    "only version 0 (legacy_export) is supported",
                    path);
  }
  memset(&c, 0, sizeof c);
  c.dim = header[0];
  c.hidden_dim = header[1];
  c.n_layers = header[2];
  c.n_heads = header[3];
  c.n_kv_heads = header[4];
  c.shared_classifier = header[5] > 0 ? 1 : 0;
  c.vocab_size = header[5] == INT32_MIN ? 0 : (header[5] < 0 ? -header[5] : header[5]);
  c.seq_len = header[6];
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  {
    char source[64 + 4096];
    snprintf(source, sizeof source, "%s: bad header", path);
    if (kvl_model_check_config(&c, source, error, error_size) != 0) {
      fclose(f);
      return -1;
    }
  }
  l = layout_of(&c);
  expected = sizeof header + l.in_file * sizeof(float);
  if ((uint64_t)file_size != expected) {
    fclose(f);
    return kvl_fail(error, error_size,
                    "%s: %s file: %ld bytes, but a version 0 checkpoint with dim %d, hidden_dim "
                    "%d, n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d "
                    "(%s classifier) has %llu bytes",
                    path, (uint64_t)file_size < expected ? "short" : "oversized", file_size,
                    (int)c.dim, (int)c.hidden_dim, (int)c.n_layers, (int)c.n_heads,
                    (int)c.n_kv_heads, (int)c.vocab_size, (int)c.seq_len,
                    c.shared_classifier ? "shared" : "separate", (unsigned long long)expected);
  }
  if (kvl_model_allocate(&c, &m, error, error_size) != 0) {
    fclose(f);
    return -1;
  }
  /* Everything up to rms_final is contiguous in the file and in memory. */
  if (read_floats(f, m->storage, l.stored - l.wcls) != 0 ||
      fseek(f, (long)(l.freq_cis * sizeof(float)), SEEK_CUR) != 0 ||
      (l.wcls > 0 && read_floats(f, (float *)m->wcls, l.wcls) != 0)) {
    fclose(f);
    kvl_model_free(m);
    return kvl_fail(error, error_size, "%s: read error", path);
  }
  fclose(f);
  if (kvl_weights_prepare(m, error, error_size) != 0) {
    kvl_model_free(m);
    return -1;
  }
  *out_model = m;
  return 0;
}

/* splitmix64: a small, well-mixed generator; the same seed gives the same model everywhere. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-a, a) with a = 0.02 * sqrt(3): mean 0 and standard deviation 0.02, the scale
 * of a N(0, 0.02) initialisation, at a fraction of the cost of normal samples. */
static void fill_random(float *dst, uint64_t n, uint64_t *state) {
  const float a = 0.02f * 1.7320508f;
  uint64_t i;
  for (i = 0; i < n; ++i) {
    float u = (float)(next_random(state) >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
    dst[i] = (2.0f * u - 1.0f) * a;
  }
}

static void fill_ones(float *dst, uint64_t n) {
  uint64_t i;
  for (i = 0; i < n; ++i) dst[i] = 1.0f;
}

int kvl_model_random(const kvl_config *config, uint64_t seed, kvl_model **out_model, char *error,
                     size_t error_size) {
  kvl_config c;
  layout l;
  kvl_model *m = NULL;
  uint64_t state = seed;
  if (config == NULL || out_model == NULL) {
    return kvl_fail(error, error_size, "kvl_model_random: config and out_model must not be NULL");
  }
  c = *config;
  /* 0 means the llama2.c constants. */
  if (c.rope_theta == 0.0f) c.rope_theta = 10000.0f;
  if (c.norm_eps == 0.0f) c.norm_eps = 1e-5f;
  if (kvl_model_check_config(&c, "kvl_model_random", error, error_size) != 0) return -1;
  if (kvl_model_allocate(&c, &m, error, error_size) != 0) return -1;
  l = layout_of(&c);
  fill_random((float *)m->token_embedding, l.emb, &state);
  fill_ones((float *)m->rms_att, l.rms_att);
  fill_random((float *)m->wq, l.wq + l.wk + l.wv + l.wo, &state); /* contiguous */
  fill_ones((float *)m->rms_ffn, l.rms_ffn);
  fill_random((float *)m->w1, l.w1 + l.w2 + l.w3, &state); /* contiguous */
  fill_ones((float *)m->rms_final, l.rms_final);
  if (l.wcls > 0) fill_random((float *)m->wcls, l.wcls, &state);
  if (kvl_weights_prepare(m, error, error_size) != 0) {
    kvl_model_free(m);
    return -1;
  }
  *out_model = m;
  return 0;
}

int kvl_model_is_gguf(const char *path) { return kvl_gguf_is_gguf(path); }

int32_t kvl_model_bos(const kvl_model *model) { return model != NULL ? model->bos : -1; }

int32_t kvl_model_eos(const kvl_model *model) { return model != NULL ? model->eos : -1; }

const kvl_config *kvl_model_config(const kvl_model *model) {
  return model != NULL ? &model->config : NULL;
}

void kvl_model_free(kvl_model *model) {
  if (model == NULL) return;
  kvl_weights_free(model);
  free(model->storage);
  free(model);
}

void kvl_cache_params_for(const kvl_model *model, kvc_cache_params *params) {
  if (model == NULL || params == NULL) return;
  kvc_cache_params_init(params);
  params->layers = model->config.n_layers;
  params->kv_heads = model->config.n_kv_heads;
  params->q_heads = model->config.n_heads;
  params->head_dim = model->head_dim;
}
