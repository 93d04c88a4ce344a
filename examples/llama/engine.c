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
/* blis.h needs POSIX barriers; sysconf counts the cores. */
#define _POSIX_C_SOURCE 200809L
#include <blis.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Matrix products of fewer multiply-adds run on the calling thread alone: for them handing
 * work to another thread costs more than it saves. A decode step's layer products (80k to
 * 220k multiply-adds per row) are larger: their weights stream from memory, and both threads
 * of a core together read them faster than one. */
#define KVL_SPLIT_MULADDS 32768
/* A split product is cut into chunks of about this many multiply-adds (whole 16-row groups of
 * W; at most KVL_CHUNKS_PER_THREAD per thread), which the threads claim one at a time: a
 * thread that is late (asleep, or descheduled on a loaded machine) leaves its chunks to the
 * others instead of making them wait for a fixed share. */
#define KVL_CHUNK_MULADDS 131072
#define KVL_CHUNKS_PER_THREAD 8
/* The most threads one product is split over. */
#define KVL_MAX_THREADS 64
/* How often a waiting thread polls (with a pause, 30 ns here) before it sleeps on a
 * condition variable: a few decode-step products, so that workers stay awake between the
 * products of one layer. Before kvcache's attention, whose own threads want the cores, the
 * engine lets them sleep at once (pool_rest). */
#define KVL_SPIN_POLLS 1000

/* y[rows, out] = x[rows, in] W^T (+ beta * y), cut into chunks of `chunk` rows of W. */
typedef struct product_job {
  float *y;
  const float *x, *w;
  int32_t rows, in, out, chunk;
  float beta;
} product_job;

/* Threads that live as long as the engine and help the calling thread with its products.
 * Starting a thread per product cost about 30 us, more than a decode step's layer products
 * take. A product's chunks are claimed through `claim`: bits 20.. its number of chunks, bits
 * 0..19 the next chunk. A claim past the chunk count gets
 * nothing, and a thread that still holds a valid claim keeps the product (and `job`) from
 * changing until it has counted its chunk in `completed`, so a late helper never computes a
 * chunk of the wrong product. */
typedef struct product_pool {
  pthread_t threads[KVL_MAX_THREADS];
  int32_t workers;          /* threads started */
  pthread_mutex_t lock;
  pthread_cond_t wake;      /* a new product, or stop */
  pthread_cond_t finished;  /* the last chunk of a product is done */
  product_job job;          /* the current product */
  uint64_t claim;
  int32_t completed;        /* chunks of the current product done */
  unsigned generation;      /* bumped (under lock) for each product */
  int32_t sleepers;         /* workers waiting on `wake` */
  int resting;              /* set by pool_rest: workers sleep without polling */
  int caller_sleeping;      /* the calling thread waits on `finished` */
  int stop;
} product_pool;

struct kvl_engine {
  const kvl_model *model;
  kvc_cache *cache;
  int32_t max_tokens;
  int32_t threads;  /* threads of the matrix products: the calling one and the pool's */
  product_pool pool;
  int pool_ready;   /* the pool's lock and condition variables exist */
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

/* Rows [first, first + count) of W's product, on one BLIS thread. For a few rows BLIS's
 * small-matrix ("sup") path reads W where it lies, where OpenBLAS's sgemm repacked all of W on
 * every call (more than half of a decode step's time). */
static void compute_rows(const product_job *p, int32_t first, int32_t count) {
  float one = 1.0f, beta = p->beta;
  rntm_t serial = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(1, &serial);
  bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, p->rows, count, p->in, &one, (float *)p->x,
               p->in, 1, (float *)p->w + (size_t)first * p->in, p->in, 1, &beta, p->y + first,
               p->out, 1, NULL, &serial);
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#define KVL_CLAIM_BITS 20
#define KVL_CLAIM_MASK ((UINT64_C(1) << KVL_CLAIM_BITS) - 1)

/* Claims and computes chunks of the current product until none is left. */
static void compute_chunks(product_pool *pool) {
  for (;;) {
    const uint64_t ticket = __atomic_fetch_add(&pool->claim, 1, __ATOMIC_ACQ_REL);
    const int32_t n = (int32_t)((ticket >> KVL_CLAIM_BITS) & KVL_CLAIM_MASK);
    const int32_t index = (int32_t)(ticket & KVL_CLAIM_MASK);
    const product_job *p = &pool->job;
    int32_t first, count;
    if (index >= n) return;
    first = index * p->chunk;
    count = p->out - first < p->chunk ? p->out - first : p->chunk;
    compute_rows(p, first, count);
    if (__atomic_add_fetch(&pool->completed, 1, __ATOMIC_ACQ_REL) == n) {
      pthread_mutex_lock(&pool->lock);
      if (pool->caller_sleeping) pthread_cond_signal(&pool->finished);
      pthread_mutex_unlock(&pool->lock);
    }
  }
}

static void *pool_worker(void *arg) {
  product_pool *pool = (product_pool *)arg;
  unsigned seen = 0;
  for (;;) {
    int polls;
    for (polls = 0; polls < KVL_SPIN_POLLS &&
                    __atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE) == seen &&
                    !__atomic_load_n(&pool->resting, __ATOMIC_RELAXED);
         ++polls) {
      cpu_relax();
    }
    pthread_mutex_lock(&pool->lock);
    ++pool->sleepers;
    while (pool->generation == seen && !pool->stop) pthread_cond_wait(&pool->wake, &pool->lock);
    --pool->sleepers;
    seen = pool->generation;
    if (pool->stop) {
      pthread_mutex_unlock(&pool->lock);
      return NULL;
    }
    pthread_mutex_unlock(&pool->lock);
    compute_chunks(pool);
  }
}

/* Starts up to `count` workers; the pool then has as many as started. Returns 0 when its lock
 * or condition variables could not be created (the engine then runs every product alone). */
static int pool_start(product_pool *pool, int32_t count) {
  int32_t i;
  if (pthread_mutex_init(&pool->lock, NULL) != 0) return 0;
  if (pthread_cond_init(&pool->wake, NULL) != 0) {
    pthread_mutex_destroy(&pool->lock);
    return 0;
  }
  if (pthread_cond_init(&pool->finished, NULL) != 0) {
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    return 0;
  }
  for (i = 0; i < count; ++i) {
    if (pthread_create(&pool->threads[i], NULL, pool_worker, pool) != 0) break;
    ++pool->workers;
  }
  return 1;
}

/* Until the next product, idle workers sleep instead of polling: the calling thread is about
 * to do other work (attention on kvcache's threads, or return to the caller). */
static void pool_rest(product_pool *pool) { __atomic_store_n(&pool->resting, 1, __ATOMIC_RELAXED); }

static void pool_stop(product_pool *pool) {
  int32_t i;
  pthread_mutex_lock(&pool->lock);
  pool->stop = 1;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  for (i = 0; i < pool->workers; ++i) pthread_join(pool->threads[i], NULL);
  pthread_cond_destroy(&pool->finished);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->lock);
}

/* Runs `job` (n chunks) on the calling thread and whichever workers join in; returns once
 * every chunk is done. */
static void pool_run(product_pool *pool, const product_job *job, int32_t n) {
  int polls;
  pool->job = *job;
  __atomic_store_n(&pool->completed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&pool->resting, 0, __ATOMIC_RELAXED);
  pthread_mutex_lock(&pool->lock);
  __atomic_store_n(&pool->claim, (uint64_t)n << KVL_CLAIM_BITS, __ATOMIC_RELEASE);
  __atomic_store_n(&pool->generation, pool->generation + 1, __ATOMIC_RELEASE);
  if (pool->sleepers > 0) pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  compute_chunks(pool);
  for (polls = 0; polls < KVL_SPIN_POLLS &&
                  __atomic_load_n(&pool->completed, __ATOMIC_ACQUIRE) < n;
       ++polls) {
    cpu_relax();
  }
  pthread_mutex_lock(&pool->lock);
  pool->caller_sleeping = 1;
  while (__atomic_load_n(&pool->completed, __ATOMIC_ACQUIRE) < n) {
    pthread_cond_wait(&pool->finished, &pool->lock);
  }
  pool->caller_sleeping = 0;
  pthread_mutex_unlock(&pool->lock);
}

/* y[rows, out] = x[rows, in] W^T (+ beta * y), W row-major [out, in] as llama2.c stores it.
 * A product of KVL_SPLIT_MULADDS or more is shared by the calling thread and the pool's
 * workers, chunk by chunk, each chunk one independent single-threaded BLIS call: BLIS's own
 * threads wait for each other in spinning barriers, which on a loaded machine (a partner
 * thread descheduled) spin away whole time slices, where here a late worker's chunks are done
 * by the others and an idle worker sleeps after a short poll. */
static void matmul_t(kvl_engine *e, float *y, const float *x, const float *w, int32_t rows,
                     int32_t in, int32_t out, float beta) {
  const double muladds = (double)rows * in * out;
  product_job job;
  int32_t chunks;
  job.y = y;
  job.x = x;
  job.w = w;
  job.rows = rows;
  job.in = in;
  job.out = out;
  job.beta = beta;
  job.chunk = out;
  if (e->threads == 1 || muladds < KVL_SPLIT_MULADDS) {
    compute_rows(&job, 0, out);
    return;
  }
  chunks = (int32_t)(muladds / KVL_CHUNK_MULADDS);
  if (chunks > e->threads * KVL_CHUNKS_PER_THREAD) chunks = e->threads * KVL_CHUNKS_PER_THREAD;
  if (chunks < e->threads) chunks = e->threads;
  job.chunk = ((out + chunks - 1) / chunks + 15) / 16 * 16;
  pool_run(&e->pool, &job, (out + job.chunk - 1) / job.chunk);
}

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
  return total;
}

void kvl_engine_free(kvl_engine *e) {
  if (e == NULL) return;
  if (e->pool_ready) pool_stop(&e->pool);
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
  {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int32_t wanted = cores < 1 ? 1 : cores > KVL_MAX_THREADS ? KVL_MAX_THREADS : (int32_t)cores;
    e->pool_ready = pool_start(&e->pool, wanted - 1);
    e->threads = 1 + e->pool.workers;
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
  size_t dim, kv_dim, hidden;
  kvc_batch batch;
  kvc_attention_params attention;
  kvc_tensor tq, tk, tv;
  kvc_tensor_mut tout;

  if (e == NULL || seq_ids == NULL || n_tokens == NULL || tokens == NULL || positions == NULL ||
      logits == NULL) {
    return kvl_fail(error, error_size, "kvl_engine_forward: NULL argument");
  }
  m = e->model;
  c = &m->config;
  dim = (size_t)c->dim;
  kv_dim = (size_t)m->kv_dim;
  hidden = (size_t)c->hidden_dim;
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
    kvc_status *status;
    for (t = 0; t < total; ++t) {
      rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, m->rms_att + (size_t)l * dim, c->dim,
              c->norm_eps);
    }
    matmul_t(e, e->q, e->xb, m->wq + (size_t)l * dim * dim, total, c->dim, c->dim, 0.0f);
    matmul_t(e, e->k, e->xb, m->wk + (size_t)l * kv_dim * dim, total, c->dim, m->kv_dim, 0.0f);
    matmul_t(e, e->v, e->xb, m->wv + (size_t)l * kv_dim * dim, total, c->dim, m->kv_dim, 0.0f);
    apply_rope(e, total, positions);

    if (e->pool_ready) pool_rest(&e->pool);
    status = kvc_append_attend(e->cache, l, &batch, &tq, &tk, &tv, &attention, &tout);
    if (status != NULL) {
      char what[160];
      if (l == 0) {
        snprintf(what, sizeof what, "kvl_engine_forward: layer 0 (nothing was stored)");
      } else {
        snprintf(what, sizeof what,
                 "kvl_engine_forward: layer %d (layers 0..%d already store this batch's tokens; "
                 "remove its sequences)",
                 (int)l, (int)l - 1);
      }
      return kvl_fail_status(status, error, error_size, what);
    }
    matmul_t(e, e->x, e->att, m->wo + (size_t)l * dim * dim, total, c->dim, c->dim, 1.0f);

    for (t = 0; t < total; ++t) {
      rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, m->rms_ffn + (size_t)l * dim, c->dim,
              c->norm_eps);
    }
    matmul_t(e, e->hb, e->xb, m->w1 + (size_t)l * hidden * dim, total, c->dim, c->hidden_dim,
             0.0f);
    matmul_t(e, e->hb2, e->xb, m->w3 + (size_t)l * hidden * dim, total, c->dim, c->hidden_dim,
             0.0f);
    {
      const size_t n = (size_t)total * hidden;
      size_t j;
      for (j = 0; j < n; ++j) {
        float a = e->hb[j];
        e->hb[j] = a / (1.0f + expf(-a)) * e->hb2[j];
      }
    }
    matmul_t(e, e->x, e->hb, m->w2 + (size_t)l * dim * hidden, total, c->hidden_dim, c->dim,
             1.0f);
  }

  if (all_logits) {
    out_rows = total;
    for (t = 0; t < total; ++t) {
      rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, m->rms_final, c->dim, c->norm_eps);
    }
  } else {
    int32_t last = -1;
    out_rows = n_seqs;
    for (i = 0; i < n_seqs; ++i) {
      last += n_tokens[i];
      rmsnorm(e->xb + (size_t)i * dim, e->x + (size_t)last * dim, m->rms_final, c->dim,
              c->norm_eps);
    }
  }
  matmul_t(e, logits, e->xb, m->wcls, out_rows, c->dim, c->vocab_size, 0.0f);
  if (e->pool_ready) pool_rest(&e->pool);
  return 0;
}
