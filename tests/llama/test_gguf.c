/*
 * kvc-llama-gguf-tests: the GGUF reader of the example engine.
 *
 *   kvc-llama-gguf-tests synthetic
 *     writes small GGUF files itself (its own writer, and its own expected values computed
 *     from the block formats of ggml's spec) and checks what kvl_model_load and the
 *     tokenizer read from them: every supported tensor type, the metadata, tied
 *     embeddings, byte-level decoding, and clear errors for truncated files, wrong magic,
 *     unsupported versions and tensor types, missing keys and other architectures.
 *   kvc-llama-gguf-tests smollm2 MODEL IDS TEXT
 *     loads SmolLM2-135M-Instruct (Q4_1) and checks its configuration, that the first ids of
 *     Tom Sawyer decode to the start of the text, that encoding the whole text gives exactly
 *     the ids Hugging Face tokenizers gave (the ids file), and that the full-cache NLL of the first
 *     512 ids (511 predictions) is 3.4268 within 1e-3, the figure the model's README gives
 *     from an independent forward pass. Exits with 77 (skipped) when the files are absent.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "internal.h"
#include "llama.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* ------------------------------------------------------------------ a GGUF writer */

typedef struct buffer {
  unsigned char *data;
  size_t size, capacity;
} buffer;

static void put(buffer *b, const void *p, size_t n) {
  if (b->size + n > b->capacity) {
    b->capacity = (b->size + n) * 2 + 1024;
    b->data = (unsigned char *)realloc(b->data, b->capacity);
    if (b->data == NULL) abort();
  }
  memcpy(b->data + b->size, p, n);
  b->size += n;
}

static void put_u32(buffer *b, uint32_t v) {
  unsigned char p[4];
  int i;
  for (i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
  put(b, p, 4);
}

static void put_u64(buffer *b, uint64_t v) {
  put_u32(b, (uint32_t)v);
  put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(buffer *b, const char *s) {
  put_u64(b, strlen(s));
  put(b, s, strlen(s));
}

static void kv_u32(buffer *b, const char *key, uint32_t v) {
  put_str(b, key);
  put_u32(b, 4); /* uint32 */
  put_u32(b, v);
}

static void kv_f32(buffer *b, const char *key, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  put_str(b, key);
  put_u32(b, 6); /* float32 */
  put_u32(b, bits);
}

static void kv_bool(buffer *b, const char *key, int v) {
  unsigned char c = (unsigned char)v;
  put_str(b, key);
  put_u32(b, 7);
  put(b, &c, 1);
}

static void kv_str(buffer *b, const char *key, const char *v) {
  put_str(b, key);
  put_u32(b, 8);
  put_str(b, v);
}

/* The synthetic model: dim 32, 2 heads of 16 over 1 KV head, hidden 64, 1 layer. */
enum { DIM = 32, HIDDEN = 64, KV_DIM = 16, VOCAB = 40, QK = 32 };

typedef struct tensor {
  const char *name;
  uint32_t cols, rows, type;
} tensor;

static const tensor tensors[] = {
    {"token_embd.weight", DIM, VOCAB, 8},        {"output_norm.weight", DIM, 1, 0},
    {"blk.0.attn_norm.weight", DIM, 1, 0},       {"blk.0.attn_q.weight", DIM, DIM, 2},
    {"blk.0.attn_k.weight", DIM, KV_DIM, 3},     {"blk.0.attn_v.weight", DIM, KV_DIM, 1},
    {"blk.0.attn_output.weight", DIM, DIM, 0},   {"blk.0.ffn_norm.weight", DIM, 1, 0},
    {"blk.0.ffn_gate.weight", DIM, HIDDEN, 3},   {"blk.0.ffn_down.weight", HIDDEN, DIM, 2},
    {"blk.0.ffn_up.weight", DIM, HIDDEN, 1},
};
enum { N_TENSORS = sizeof tensors / sizeof tensors[0] };

static uint32_t rng_state = 12345;
static uint32_t next_byte(void) {
  rng_state = rng_state * 1103515245u + 12345u;
  return (rng_state >> 16) & 0xff;
}

/* Halves with exact values: 0x3800 = 0.5, 0xB400 = -0.25, 0x3C00 = 1, 0xC000 = -2. */
static const uint16_t scales[] = {0x3800, 0xB400, 0x3C00, 0xC000};
static const float scale_values[] = {0.5f, -0.25f, 1.0f, -2.0f};

static void put_u16(buffer *b, uint16_t v) {
  unsigned char p[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
  put(b, p, 2);
}

/* Writes n elements of `type` and their values as this test reads the spec into expect. */
static void put_data(buffer *b, uint32_t type, size_t n, float *expect) {
  size_t i, blk;
  int j;
  switch (type) {
    case 0:
      for (i = 0; i < n; ++i) {
        float v = (float)((int)next_byte() - 128) / 64.0f;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        put_u32(b, bits);
        expect[i] = v;
      }
      break;
    case 1: /* F16: multiples of 1/16 in [-8, 8), exact in half precision */
      for (i = 0; i < n; ++i) {
        int q = (int)next_byte() - 128; /* value q / 16 */
        uint16_t h;
        float v = (float)q / 16.0f;
        if (q == 0) {
          h = 0;
        } else {
          int a = q < 0 ? -q : q, e = 0;
          while ((a >> e) > 1) ++e;                               /* 2^e <= a < 2^(e+1) */
          h = (uint16_t)(((e - 4 + 15) << 10) | (((a << 10) >> e) & 0x3ff));
          if (q < 0) h |= 0x8000;
        }
        put_u16(b, h);
        expect[i] = v;
      }
      break;
    case 8: /* Q8_0 */
      for (blk = 0; blk < n / QK; ++blk) {
        const int s = (int)(blk % 4);
        put_u16(b, scales[s]);
        for (j = 0; j < QK; ++j) {
          unsigned char q = (unsigned char)next_byte();
          put(b, &q, 1);
          expect[blk * QK + (size_t)j] = scale_values[s] * (float)(signed char)q;
        }
      }
      break;
    case 2: /* Q4_0: element j < 16 is the low nibble of byte j, 16 + j its high nibble */
    case 3: /* Q4_1: the same nibbles, plus a minimum */
      for (blk = 0; blk < n / QK; ++blk) {
        const int s = (int)(blk % 4), mi = (int)((blk + 1) % 4);
        put_u16(b, scales[s]);
        if (type == 3) put_u16(b, scales[mi]);
        for (j = 0; j < QK / 2; ++j) {
          unsigned char q = (unsigned char)next_byte();
          float *e = expect + blk * QK;
          put(b, &q, 1);
          if (type == 2) {
            e[j] = scale_values[s] * (float)((q & 15) - 8);
            e[j + 16] = scale_values[s] * (float)((q >> 4) - 8);
          } else {
            e[j] = scale_values[s] * (float)(q & 15) + scale_values[mi];
            e[j + 16] = scale_values[s] * (float)(q >> 4) + scale_values[mi];
          }
        }
      }
      break;
    default:
      abort();
  }
}

/* What a synthetic file leaves out or changes. */
typedef struct variant {
  const char *skip_key;   /* a metadata key to leave out */
  const char *arch;       /* general.architecture (default llama) */
  uint32_t version;       /* default 3 */
  int bad_type_tensor;    /* index of a tensor written with type Q4_K (12), -1: none */
} variant;

static const variant plain = {NULL, NULL, 0, -1};

/* Writes a synthetic model to path; expect[t] gets tensor t's values (may be NULL). */
static size_t write_model(const char *path, const variant *v, float **expect) {
  buffer b = {NULL, 0, 0};
  const char *tokens[VOCAB];
  char names[VOCAB][16];
  uint64_t offset = 0;
  uint32_t n_kv = 0;
  size_t i, kv_count_at;
  FILE *f;
  for (i = 0; i < VOCAB; ++i) {
    snprintf(names[i], sizeof names[i], "t%u", (unsigned)i);
    tokens[i] = names[i];
  }
  tokens[0] = "<|endoftext|>";
  tokens[1] = "\xC4\xA0hello"; /* "Ġhello" */
  tokens[2] = "\xC4\x8A";      /* "Ċ", the stand-in of '\n' */
  rng_state = 12345;
  put(&b, "GGUF", 4);
  put_u32(&b, v->version ? v->version : 3);
  put_u64(&b, N_TENSORS);
  kv_count_at = b.size;
  put_u64(&b, 0); /* patched below */
#define KV(cond, call) \
  if (cond) {          \
    call;              \
    ++n_kv;            \
  }
#define KEEP(key) (v->skip_key == NULL || strcmp(v->skip_key, key) != 0)
  KV(KEEP("general.architecture"), kv_str(&b, "general.architecture", v->arch ? v->arch : "llama"));
  KV(1, kv_u32(&b, "general.alignment", 32));
  KV(KEEP("llama.block_count"), kv_u32(&b, "llama.block_count", 1));
  KV(KEEP("llama.embedding_length"), kv_u32(&b, "llama.embedding_length", DIM));
  KV(KEEP("llama.feed_forward_length"), kv_u32(&b, "llama.feed_forward_length", HIDDEN));
  KV(KEEP("llama.attention.head_count"), kv_u32(&b, "llama.attention.head_count", 2));
  KV(KEEP("llama.attention.head_count_kv"), kv_u32(&b, "llama.attention.head_count_kv", 1));
  KV(KEEP("llama.context_length"), kv_u32(&b, "llama.context_length", 64));
  KV(KEEP("llama.rope.freq_base"), kv_f32(&b, "llama.rope.freq_base", 100000.0f));
  KV(KEEP("llama.attention.layer_norm_rms_epsilon"),
     kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-6f));
  KV(1, kv_str(&b, "tokenizer.ggml.model", "gpt2"));
  KV(1, kv_bool(&b, "tokenizer.ggml.add_bos_token", 0));
  KV(1, kv_u32(&b, "tokenizer.ggml.bos_token_id", 1));
  KV(1, kv_u32(&b, "tokenizer.ggml.eos_token_id", 0));
  {
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, 9);
    put_u32(&b, 8);
    put_u64(&b, VOCAB);
    for (i = 0; i < VOCAB; ++i) put_str(&b, tokens[i]);
    ++n_kv;
    put_str(&b, "tokenizer.ggml.token_type");
    put_u32(&b, 9);
    put_u32(&b, 5);
    put_u64(&b, VOCAB);
    for (i = 0; i < VOCAB; ++i) put_u32(&b, i == 0 ? 3 : 1);
    ++n_kv;
  }
#undef KEEP
#undef KV
  {
    unsigned char *p = b.data + kv_count_at;
    for (i = 0; i < 8; ++i) p[i] = (unsigned char)((uint64_t)n_kv >> (8 * i));
  }
  for (i = 0; i < N_TENSORS; ++i) {
    const tensor *t = &tensors[i];
    uint32_t type = (int)i == v->bad_type_tensor ? 12 : t->type;
    size_t n = (size_t)t->cols * t->rows, bytes;
    put_str(&b, t->name);
    put_u32(&b, t->rows == 1 ? 1 : 2);
    put_u64(&b, t->cols);
    if (t->rows != 1) put_u64(&b, t->rows);
    put_u32(&b, type);
    put_u64(&b, offset);
    bytes = t->type == 0 ? 4 * n : t->type == 1 ? 2 * n : t->type == 8 ? n / 32 * 34
            : t->type == 2 ? n / 32 * 18 : n / 32 * 20;
    offset += (bytes + 31) / 32 * 32;
  }
  while (b.size % 32 != 0) put(&b, "", 1);
  for (i = 0; i < N_TENSORS; ++i) {
    const tensor *t = &tensors[i];
    size_t n = (size_t)t->cols * t->rows;
    float *e = (float *)malloc(n * sizeof(float));
    put_data(&b, t->type, n, e);
    while (b.size % 32 != 0) put(&b, "", 1);
    if (expect != NULL) {
      expect[i] = e;
    } else {
      free(e);
    }
  }
  f = fopen(path, "wb");
  if (f == NULL || fwrite(b.data, 1, b.size, f) != b.size || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  free(b.data);
  return b.size;
}

static int contains(const char *s, const char *part) { return strstr(s, part) != NULL; }

/* Loads path, expecting failure with a message containing each given part. */
static void expect_error(const char *path, const char *part1, const char *part2) {
  kvl_model *m = NULL;
  char error[1024] = "";
  int rc = kvl_model_load(path, &m, error, sizeof error);
  CHECK(rc == -1);
  CHECK(m == NULL);
  if (!contains(error, part1) || (part2 != NULL && !contains(error, part2))) {
    fprintf(stderr, "unexpected message: %s (expected '%s'%s%s)\n", error, part1,
            part2 ? " and " : "", part2 ? part2 : "");
    ++failures;
  }
  if (rc == 0) kvl_model_free(m);
}

static void compare(const char *what, const float *got, const float *expect, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    if (got[i] != expect[i]) {
      fprintf(stderr, "%s[%zu] = %g, expected %g\n", what, i, (double)got[i], (double)expect[i]);
      ++failures;
      return;
    }
  }
}

static int test_synthetic(const char *dir) {
  char path[4096], cut[4096];
  float *expect[N_TENSORS];
  kvl_model *m = NULL;
  kvl_tokenizer *t = NULL;
  char error[1024];
  size_t size, i;
  snprintf(path, sizeof path, "%s/synthetic.gguf", dir);
  size = write_model(path, &plain, expect);

  CHECK(kvl_model_is_gguf(path));
  if (kvl_model_load(path, &m, error, sizeof error) != 0) {
    fprintf(stderr, "kvl_model_load: %s\n", error);
    return 1;
  }
  {
    const kvl_config *c = kvl_model_config(m);
    CHECK(c->dim == DIM && c->hidden_dim == HIDDEN && c->n_layers == 1);
    CHECK(c->n_heads == 2 && c->n_kv_heads == 1 && c->vocab_size == VOCAB && c->seq_len == 64);
    CHECK(c->shared_classifier == 1);
    CHECK(c->rope_theta == 100000.0f && c->norm_eps == 1e-6f);
    CHECK(kvl_model_bos(m) == -1); /* add_bos_token false */
    CHECK(kvl_model_eos(m) == 0);
  }
  compare("token_embd (Q8_0)", m->token_embedding, expect[0], (size_t)DIM * VOCAB);
  CHECK(m->wcls == m->token_embedding);
  compare("output_norm (F32)", m->rms_final, expect[1], DIM);
  compare("attn_norm (F32)", m->rms_att, expect[2], DIM);
  compare("attn_q (Q4_0)", m->wq, expect[3], (size_t)DIM * DIM);
  compare("attn_k (Q4_1)", m->wk, expect[4], (size_t)DIM * KV_DIM);
  compare("attn_v (F16)", m->wv, expect[5], (size_t)DIM * KV_DIM);
  compare("attn_output (F32)", m->wo, expect[6], (size_t)DIM * DIM);
  compare("ffn_norm (F32)", m->rms_ffn, expect[7], DIM);
  compare("ffn_gate (Q4_1)", m->w1, expect[8], (size_t)DIM * HIDDEN);
  compare("ffn_down (Q4_0)", m->w2, expect[9], (size_t)DIM * HIDDEN);
  compare("ffn_up (F16)", m->w3, expect[10], (size_t)DIM * HIDDEN);
  for (i = 0; i < N_TENSORS; ++i) free(expect[i]);

  if (kvl_tokenizer_load(path, VOCAB, &t, error, sizeof error) != 0) {
    fprintf(stderr, "kvl_tokenizer_load: %s\n", error);
    ++failures;
  } else {
    CHECK(strcmp(kvl_tokenizer_decode(t, -1, 1), " hello") == 0);
    CHECK(strcmp(kvl_tokenizer_decode(t, 1, 2), "\n") == 0);
    CHECK(strcmp(kvl_tokenizer_decode(t, 1, 0), "<|endoftext|>") == 0); /* control token */
    CHECK(strcmp(kvl_tokenizer_decode(t, 1, 7), "t7") == 0);
    kvl_tokenizer_free(t);
  }
  kvl_model_free(m);

  { /* the half conversion: subnormal, infinity, NaN, negative zero */
    CHECK(kvl_half_to_float(0x0001) == ldexpf(1.0f, -24));
    CHECK(kvl_half_to_float(0x7BFF) == 65504.0f);
    CHECK(isinf(kvl_half_to_float(0xFC00)) && kvl_half_to_float(0xFC00) < 0);
    CHECK(isnan(kvl_half_to_float(0x7E00)));
    CHECK(kvl_half_to_float(0x3555) == 0.25f + 0x155 / 4096.0f);
  }

  /* Truncated at every 97th byte: a clear error each time, never a crash. */
  {
    FILE *in = fopen(path, "rb");
    unsigned char *all = (unsigned char *)malloc(size);
    size_t at;
    int quiet_failures = 0;
    if (in == NULL || fread(all, 1, size, in) != size) abort();
    fclose(in);
    snprintf(cut, sizeof cut, "%s/truncated.gguf", dir);
    for (at = 4; at < size; at += 97) {
      FILE *out = fopen(cut, "wb");
      char msg[1024] = "";
      kvl_model *mm = NULL;
      fwrite(all, 1, at, out);
      fclose(out);
      if (kvl_model_load(cut, &mm, msg, sizeof msg) == 0) {
        kvl_model_free(mm);
        fprintf(stderr, "a file cut at byte %zu of %zu loaded\n", at, size);
        ++failures;
      } else if (!contains(msg, "truncated GGUF file")) {
        if (quiet_failures++ == 0) fprintf(stderr, "cut at %zu: %s\n", at, msg);
      }
    }
    CHECK(quiet_failures == 0);
    free(all);
  }
  {
    variant v = plain;
    kvl_gguf *g = NULL;
    FILE *out;
    snprintf(cut, sizeof cut, "%s/bad.gguf", dir);
    v.skip_key = "llama.block_count";
    write_model(cut, &v, NULL);
    expect_error(cut, "missing GGUF key 'llama.block_count'", NULL);
    v = plain;
    v.skip_key = "llama.attention.layer_norm_rms_epsilon";
    write_model(cut, &v, NULL);
    expect_error(cut, "missing GGUF key 'llama.attention.layer_norm_rms_epsilon'", NULL);
    v = plain;
    v.arch = "gpt2";
    write_model(cut, &v, NULL);
    expect_error(cut, "unsupported architecture 'gpt2'", NULL);
    v = plain;
    v.version = 1;
    write_model(cut, &v, NULL);
    expect_error(cut, "unsupported GGUF version 1", NULL);
    v = plain;
    v.bad_type_tensor = 3;
    write_model(cut, &v, NULL);
    expect_error(cut, "blk.0.attn_q.weight", "Q4_K");
    out = fopen(cut, "wb");
    fputs("GGML not a gguf file at all, but long enough", out);
    fclose(out);
    CHECK(!kvl_model_is_gguf(cut));
    CHECK(kvl_gguf_open(cut, &g, error, sizeof error) == -1 && contains(error, "wrong magic"));
    remove(cut);
    remove(path);
  }
  return 0;
}

/* ------------------------------------------------------------------ SmolLM2-135M */

static int test_smollm2(const char *model_path, const char *ids_path, const char *text_path) {
  FILE *f;
  kvl_model *m = NULL;
  kvl_tokenizer *t = NULL;
  kvc_context *ctx = NULL;
  kvc_cache *cache = NULL;
  kvl_engine *engine = NULL;
  kvc_cache_params p;
  char error[1024];
  int32_t ids[512], pos[512], i, seq = 0, n = 512;
  float *logits;
  double nll = 0.0;
  char text[256], decoded[4096] = "";

  f = fopen(model_path, "rb");
  if (f == NULL || (fclose(f), (f = fopen(ids_path, "r")) == NULL)) {
    printf("skipped: %s or %s not found\n", model_path, ids_path);
    return 77;
  }
  for (i = 0; i < n; ++i) {
    if (fscanf(f, "%d", &ids[i]) != 1) {
      fprintf(stderr, "%s: fewer than 512 ids\n", ids_path);
      return 1;
    }
  }
  fclose(f);
  if (kvl_model_load(model_path, &m, error, sizeof error) != 0 ||
      kvl_tokenizer_load(model_path, kvl_model_config(m)->vocab_size, &t, error, sizeof error) !=
          0) {
    fprintf(stderr, "%s\n", error);
    return 1;
  }
  {
    const kvl_config *c = kvl_model_config(m);
    CHECK(c->n_layers == 30 && c->dim == 576 && c->hidden_dim == 1536);
    CHECK(c->n_heads == 9 && c->n_kv_heads == 3 && c->dim / c->n_heads == 64);
    CHECK(c->vocab_size == 49152 && c->seq_len == 8192 && c->shared_classifier == 1);
    CHECK(c->rope_theta == 100000.0f && fabsf(c->norm_eps - 1e-5f) < 1e-12f);
    CHECK(kvl_model_bos(m) == -1);
  }
  /* The ids decode to the text they were encoded from. */
  for (i = 0; i < 40; ++i) strcat(decoded, kvl_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i]));
  f = fopen(text_path, "rb");
  if (f != NULL) {
    size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = '\0';
    fclose(f);
    if (strncmp(decoded, text, strlen(decoded)) != 0 || strlen(decoded) < 40) {
      fprintf(stderr, "the first 40 ids decode to '%s', the text starts '%.80s'\n", decoded,
              text);
      ++failures;
    }
  }

  { /* The encoder against Hugging Face tokenizers: the whole book gives the ids file. */
    FILE *tf = fopen(text_path, "rb"), *idf = fopen(ids_path, "r");
    char *book = NULL;
    int32_t *mine = NULL, n_mine = -1, k = 0, id;
    long size = 0;
    if (tf != NULL && idf != NULL && fseek(tf, 0, SEEK_END) == 0 && (size = ftell(tf)) > 0 &&
        fseek(tf, 0, SEEK_SET) == 0 && (book = (char *)malloc((size_t)size + 1)) != NULL &&
        fread(book, 1, (size_t)size, tf) == (size_t)size &&
        (mine = (int32_t *)malloc((size_t)size * sizeof(int32_t))) != NULL) {
      book[size] = '\0';
      n_mine = kvl_tokenizer_encode(t, book, 0, 0, mine, (int32_t)size);
      while (fscanf(idf, "%d", &id) == 1) {
        if (k < n_mine && mine[k] != id) {
          fprintf(stderr, "encode: token %d is %d, tokenizers gives %d\n", (int)k,
                  (int)mine[k], (int)id);
          ++failures;
          break;
        }
        ++k;
      }
      if (k != n_mine) {
        fprintf(stderr, "encode: %d tokens, tokenizers gives %d\n", (int)n_mine, (int)k);
        ++failures;
      }
    }
    if (tf != NULL) fclose(tf);
    if (idf != NULL) fclose(idf);
    free(book);
    free(mine);
  }
  {
    int32_t chat[16], n_chat = kvl_tokenizer_encode(t, "<|im_start|>user\nHi<|im_end|>", 0, 0,
                                                    chat, 16);
    CHECK(n_chat >= 4 && chat[0] == 1 && chat[n_chat - 1] == 2); /* control tokens */
  }

  kvc_context_create(NULL, &ctx);
  kvl_cache_params_for(m, &p);
  p.dtype = KVC_DTYPE_F32;
  logits = (float *)malloc((size_t)n * 49152 * sizeof(float));
  if (ctx == NULL || kvc_cache_create(ctx, &p, &cache) != NULL || logits == NULL ||
      kvl_engine_create(m, cache, n, &engine, error, sizeof error) != 0 ||
      kvc_seq_create(cache, seq) != NULL) {
    fprintf(stderr, "setup failed: %s\n", error);
    return 1;
  }
  for (i = 0; i < n; ++i) pos[i] = i;
  if (kvl_engine_forward(engine, 1, &seq, &n, ids, pos, 1, logits, error, sizeof error) != 0) {
    fprintf(stderr, "%s\n", error);
    return 1;
  }
  for (i = 0; i + 1 < n; ++i) {
    const float *row = logits + (size_t)i * 49152;
    double mx = row[0], sum = 0.0;
    int32_t j;
    for (j = 1; j < 49152; ++j) mx = row[j] > mx ? row[j] : mx;
    for (j = 0; j < 49152; ++j) sum += exp(row[j] - mx);
    nll += log(sum) + mx - row[ids[i + 1]];
  }
  nll /= n - 1;
  printf("full-cache NLL of the first 512 ids: %.6f (expected 3.4268 +- 1e-3)\n", nll);
  CHECK(fabs(nll - 3.4268) < 1e-3);
  free(logits);
  kvl_engine_free(engine);
  kvc_cache_destroy(cache);
  kvc_context_destroy(ctx);
  kvl_tokenizer_free(t);
  kvl_model_free(m);
  return 0;
}

int main(int argc, char **argv) {
  int rc;
  if (argc == 3 && strcmp(argv[1], "synthetic") == 0) {
    rc = test_synthetic(argv[2]);
  } else if (argc == 5 && strcmp(argv[1], "smollm2") == 0) {
    rc = test_smollm2(argv[2], argv[3], argv[4]);
  } else {
    fprintf(stderr, "usage: %s synthetic DIR | smollm2 MODEL IDS TEXT\n", argv[0]);
    return 2;
  }
  if (rc != 0) return rc;
  if (failures > 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
