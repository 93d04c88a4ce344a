/*
 * Models from GGUF files of the llama architecture (llama.cpp's conversion of Hugging Face
 * Llama-family checkpoints), every tensor dequantised to f32 at load.
 *
 * ggml's dims[0] is the fastest-varying dimension, so a GGUF matrix of dims [in, out] is the
 * row-major [out, in] matrix the engine uses; tensor names map to llama2.c's weights as
 *   token_embd -> token embedding, blk.L.attn_norm -> rms_att, attn_q/k/v/output -> wq/wk/wv/wo,
 *   ffn_norm -> rms_ffn, ffn_gate -> w1, ffn_down -> w2, ffn_up -> w3, output_norm -> rms_final,
 *   output -> the classifier (absent: tied to the embedding).
 * llama.cpp's converter permutes the rows of attn_q and attn_k so that ggml's "normal" RoPE,
 * which turns adjacent pairs (2i, 2i+1), is the right one: that is the engine's RoPE, so the
 * rows are used as stored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "internal.h"

typedef struct loader {
  const kvl_gguf *g;
  kvl_model *m;
  char *error;
  size_t error_size;
} loader;

/* Dequantises the tensor `name` of dims [cols, rows] into dst. */
static int load_tensor(loader *ld, const char *name, int64_t cols, int64_t rows, float *dst) {
  const kvl_gguf *g = ld->g;
  const kvl_gguf_tensor *t = kvl_gguf_find_tensor(g, name);
  if (t == NULL) {
    return kvl_fail(ld->error, ld->error_size, "%s: missing tensor '%s'", g->path, name);
  }
  if (t->dims[0] != (uint64_t)cols || t->n_elements != (uint64_t)(cols * rows)) {
    return kvl_fail(ld->error, ld->error_size,
                    "%s: tensor '%s' has dims [%llu, %llu, %llu, %llu], expected [%lld, %lld] "
                    "from the metadata",
                    g->path, name, (unsigned long long)t->dims[0],
                    (unsigned long long)t->dims[1], (unsigned long long)t->dims[2],
                    (unsigned long long)t->dims[3], (long long)cols, (long long)rows);
  }
  if (t->data == NULL) {
    return kvl_fail(ld->error, ld->error_size,
                    "%s: tensor '%s' has type %s (%u), which this engine cannot dequantise "
                    "(supported: F32, F16, Q8_0, Q4_0, Q4_1)",
                    g->path, name, kvl_ggml_type_name(t->type), (unsigned)t->type);
  }
  kvl_ggml_dequantize(t->type, t->data, dst, t->n_elements);
  return 0;
}

/* The metadata key "<arch>.<suffix>". */
static const char *arch_key(char *buffer, size_t size, const char *arch, const char *suffix) {
  snprintf(buffer, size, "%s.%s", arch, suffix);
  return buffer;
}

static int read_config(const kvl_gguf *g, kvl_config *c, char *error, size_t error_size) {
  const char *arch = "llama";
  char key[128];
  kvl_gguf_string s;
  int64_t v;
  double f;
  const kvl_gguf_tensor *emb;

  if (kvl_gguf_get_string(g, "general.architecture", &s, error, error_size) != 0) return -1;
  if (!kvl_gguf_string_is(s, arch)) {
    return kvl_fail(error, error_size,
                    "%s: unsupported architecture '%.*s' (general.architecture); this engine "
                    "runs 'llama'",
                    g->path, (int)(s.size < 64 ? s.size : 64), s.data);
  }
  memset(c, 0, sizeof *c);
#define GET_INT(field, suffix)                                                                 \
  do {                                                                                         \
    if (kvl_gguf_get_int(g, arch_key(key, sizeof key, arch, suffix), 1, 1 << 24, &v, error,    \
                         error_size) != 0)                                                     \
      return -1;                                                                               \
    c->field = (int32_t)v;                                                                     \
  } while (0)
  GET_INT(n_layers, "block_count");
  GET_INT(dim, "embedding_length");
  GET_INT(hidden_dim, "feed_forward_length");
  GET_INT(n_heads, "attention.head_count");
  GET_INT(seq_len, "context_length");
  c->n_kv_heads = c->n_heads; /* no GQA unless the key says so */
  if (kvl_gguf_find(g, arch_key(key, sizeof key, arch, "attention.head_count_kv")) != NULL) {
    GET_INT(n_kv_heads, "attention.head_count_kv");
  }
#undef GET_INT
  if (kvl_gguf_get_float(g, arch_key(key, sizeof key, arch, "attention.layer_norm_rms_epsilon"),
                         &f, error, error_size) != 0) {
    return -1;
  }
  c->norm_eps = (float)f;
  c->rope_theta = 10000.0f; /* the default of llama.cpp when the key is absent */
  if (kvl_gguf_find(g, arch_key(key, sizeof key, arch, "rope.freq_base")) != NULL) {
    if (kvl_gguf_get_float(g, key, &f, error, error_size) != 0) return -1;
    c->rope_theta = (float)f;
  }
  /* What this engine does not implement must not be silently ignored. */
  if (kvl_gguf_find(g, arch_key(key, sizeof key, arch, "rope.scaling.type")) != NULL) {
    if (kvl_gguf_get_string(g, key, &s, error, error_size) != 0) return -1;
    if (!kvl_gguf_string_is(s, "none")) {
      return kvl_fail(error, error_size, "%s: unsupported RoPE scaling '%.*s' (%s)", g->path,
                      (int)(s.size < 64 ? s.size : 64), s.data, key);
    }
  }
  if (c->n_heads > 0 && c->dim % c->n_heads == 0) {
    static const char *const head_keys[] = {"rope.dimension_count", "attention.key_length",
                                            "attention.value_length"};
    size_t i;
    for (i = 0; i < sizeof head_keys / sizeof head_keys[0]; ++i) {
      if (kvl_gguf_find(g, arch_key(key, sizeof key, arch, head_keys[i])) == NULL) continue;
      if (kvl_gguf_get_int(g, key, 0, 1 << 24, &v, error, error_size) != 0) return -1;
      if (v != c->dim / c->n_heads) {
        return kvl_fail(error, error_size,
                        "%s: unsupported: %s = %lld differs from embedding_length / head_count "
                        "= %d",
                        g->path, key, (long long)v, (int)(c->dim / c->n_heads));
      }
    }
  }
  emb = kvl_gguf_find_tensor(g, "token_embd.weight");
  if (emb == NULL) return kvl_fail(error, error_size, "%s: missing tensor 'token_embd.weight'", g->path);
  if (emb->n_dims != 2 || emb->dims[1] > (1 << 24)) {
    return kvl_fail(error, error_size, "%s: tensor 'token_embd.weight' is not a [dim, vocab] matrix",
                    g->path);
  }
  c->vocab_size = (int32_t)emb->dims[1];
  c->shared_classifier = kvl_gguf_find_tensor(g, "output.weight") == NULL;
  {
    char source[4200];
    snprintf(source, sizeof source, "%s: bad GGUF metadata", g->path);
    return kvl_model_check_config(c, source, error, error_size);
  }
}

/* BOS/EOS ids and whether texts start with BOS (tokenizer.ggml.*). */
static int read_special_tokens(const kvl_gguf *g, kvl_model *m, char *error, size_t error_size) {
  const int64_t vocab = m->config.vocab_size;
  int64_t v;
  int add_bos;
  kvl_gguf_string model;
  m->bos = -1;
  m->eos = -1;
  if (kvl_gguf_find(g, "tokenizer.ggml.eos_token_id") != NULL) {
    if (kvl_gguf_get_int(g, "tokenizer.ggml.eos_token_id", 0, vocab - 1, &v, error,
                         error_size) != 0) {
      return -1;
    }
    m->eos = (int32_t)v;
  }
  if (kvl_gguf_find(g, "tokenizer.ggml.bos_token_id") == NULL) return 0;
  if (kvl_gguf_get_int(g, "tokenizer.ggml.bos_token_id", 0, vocab - 1, &v, error, error_size) !=
      0) {
    return -1;
  }
  /* Without add_bos_token, llama.cpp adds BOS for SentencePiece ("llama") vocabularies only. */
  if (kvl_gguf_find(g, "tokenizer.ggml.add_bos_token") != NULL) {
    if (kvl_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, error, error_size) != 0) {
      return -1;
    }
  } else {
    add_bos = kvl_gguf_find(g, "tokenizer.ggml.model") != NULL &&
              kvl_gguf_get_string(g, "tokenizer.ggml.model", &model, error, error_size) == 0 &&
              kvl_gguf_string_is(model, "llama");
  }
  if (add_bos) m->bos = (int32_t)v;
  return 0;
}

int kvl_model_load_gguf(const char *path, kvl_model **out_model, char *error, size_t error_size) {
  kvl_gguf *g = NULL;
  kvl_model *m = NULL;
  kvl_config c;
  loader ld;
  int32_t l;
  int64_t dim, kv_dim, hidden;

  if (kvl_gguf_open(path, &g, error, error_size) != 0) return -1;
  if (read_config(g, &c, error, error_size) != 0 ||
      kvl_model_allocate(&c, &m, error, error_size) != 0 ||
      read_special_tokens(g, m, error, error_size) != 0) {
    goto fail;
  }
  ld.g = g;
  ld.m = m;
  ld.error = error;
  ld.error_size = error_size;
  dim = c.dim;
  kv_dim = m->kv_dim;
  hidden = c.hidden_dim;
  if (load_tensor(&ld, "token_embd.weight", dim, c.vocab_size, (float *)m->token_embedding) !=
          0 ||
      load_tensor(&ld, "output_norm.weight", dim, 1, (float *)m->rms_final) != 0 ||
      (!c.shared_classifier &&
       load_tensor(&ld, "output.weight", dim, c.vocab_size, (float *)m->wcls) != 0)) {
    goto fail;
  }
  for (l = 0; l < c.n_layers; ++l) {
    const struct {
      const char *name;
      int64_t cols, rows;
      float *dst;
    } w[] = {
        {"attn_norm", dim, 1, (float *)m->rms_att + l * dim},
        {"attn_q", dim, dim, (float *)m->wq + l * dim * dim},
        {"attn_k", dim, kv_dim, (float *)m->wk + l * kv_dim * dim},
        {"attn_v", dim, kv_dim, (float *)m->wv + l * kv_dim * dim},
        {"attn_output", dim, dim, (float *)m->wo + l * dim * dim},
        {"ffn_norm", dim, 1, (float *)m->rms_ffn + l * dim},
        {"ffn_gate", dim, hidden, (float *)m->w1 + l * hidden * dim},
        {"ffn_down", hidden, dim, (float *)m->w2 + l * dim * hidden},
        {"ffn_up", dim, hidden, (float *)m->w3 + l * hidden * dim},
    };
    size_t i;
    for (i = 0; i < sizeof w / sizeof w[0]; ++i) {
      char name[64];
      snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, w[i].name);
      if (load_tensor(&ld, name, w[i].cols, w[i].rows, w[i].dst) != 0) goto fail;
    }
  }
  kvl_gguf_close(g);
  g = NULL;
  if (kvl_weights_prepare(m, error, error_size) != 0) goto fail;
  *out_model = m;
  return 0;

fail:
  kvl_model_free(m);
  kvl_gguf_close(g);
  return -1;
}
