/*
 * The engine's matrix products, y[rows, out] = x[rows, in] W^T (+ y), W row-major [out, in] as
 * llama2.c stores it, by one of two libraries chosen once per model (kvl_weights_prepare):
 *
 * - oneDNN's matmul, on weights reordered at load into the blocked layout (BA16a64b: blocks
 *   of 64 outputs x 16 inputs) that its AVX-512 kernels (brgemm) read. A decode step then
 *   streams each weight block once, front to back, faster than BLIS for a few rows
 *   (docs/batchmax_results.md).
 * - BLIS's small-matrix ("sup") path on W where it lies, wherever oneDNN offers no blocked
 *   kernel: there (AVX2 machines) oneDNN 2.6 falls back to a packing sgemm that is slower than
 *   BLIS for a few rows.
 * KVL_MATMUL=blis|onednn forces one, so that tests cover both on any machine; onednn then
 * fails where oneDNN has no blocked kernel.
 *
 * Either way a product is cut into slices of W's rows, which the calling thread and the
 * engine's worker threads claim one at a time: a thread that is late (asleep, or descheduled
 * on a loaded machine) leaves its slices to the others instead of making them wait for a fixed
 * share. Each slice is one single-threaded library call. oneDNN's threads are OpenMP's; every
 * oneDNN call here runs with OpenMP's thread count set to 1, so no OpenMP team is started,
 * whose idle threads would spin against kvcache's TBB workers.
 */
/* blis.h needs POSIX barriers; sysconf counts the cores. */
#define _POSIX_C_SOURCE 200809L
#include <blis.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* OpenMP's own API (libgomp, the runtime Debian's oneDNN uses), declared here rather than
 * through omp.h, which not every compiler ships. */
extern int omp_get_max_threads(void);
extern void omp_set_num_threads(int threads);

/* Products of fewer multiply-adds run on the calling thread alone: for them handing work to
 * another thread costs more than it saves. A decode step's layer products (80k to 220k
 * multiply-adds per row) are larger: their weights stream from memory, and both threads of a
 * core together read them faster than one. */
#define KVL_SPLIT_MULADDS 32768
/* A split product is cut into slices of about this many multiply-adds, at most
 * KVL_SLICES_PER_THREAD per thread. */
#define KVL_SLICE_MULADDS 131072
#define KVL_SLICES_PER_THREAD 8
/* The most threads one product is split over. */
#define KVL_MAX_THREADS 64
/* oneDNN's kernels write a slice's outputs densely ([rows, slice], the only destination its
 * brgemm kernels take) into a per-thread buffer, from which they are copied into y. Slices
 * are cut to fit this many floats, or one 64-output block where the rows need more. */
#define KVL_SLICE_FLOATS 65536
/* A oneDNN product of at least this many rows, by a matrix of at most this many bytes (one
 * that stays in the cache while every slice reads it), is cut into slices of rows instead:
 * each slice then writes its part of y directly, where slices of outputs pay a copy. */
#define KVL_ROW_SLICES_MIN_ROWS 64
#define KVL_ROW_SLICES_MAX_WEIGHT_BYTES (8u << 20)
/* oneDNN's weight blocks: 64 outputs, 16 inputs. */
#define KVL_BLOCK_OUT 64
#define KVL_BLOCK_IN 16
/* How often a waiting thread polls (with a pause) before it sleeps on a
 * condition variable: a few decode-step products, so that workers stay awake between the
 * products of one layer. Before kvcache's attention, whose own threads want the cores, the
 * engine lets them sleep at once (kvl_products_rest). */
#define KVL_SPIN_POLLS 1000

/* A model's oneDNN state: its CPU engine and the weights in the blocked layout. */
struct kvl_onednn {
  dnnl_engine_t engine;
  float *blocked;
};

/* One oneDNN matmul, [rows, in] x [in, count] into a dense [rows, count] (adding to it when
 * `accumulate`), with the memory objects each thread binds to its operands. */
typedef struct slice_primitive {
  int32_t rows, in, count, accumulate;
  dnnl_primitive_t primitive;
  dnnl_memory_t src[KVL_MAX_THREADS], weights[KVL_MAX_THREADS], dst[KVL_MAX_THREADS];
  dnnl_memory_t scratchpad[KVL_MAX_THREADS];
} slice_primitive;

/* What one thread works with: its stream and buffers (oneDNN only). */
typedef struct slot {
  dnnl_stream_t stream;
  float *out;          /* [KVL_SLICE_FLOATS or more] one slice's outputs */
  void *scratchpad;    /* oneDNN's temporary memory, `scratchpad_bytes` */
  size_t scratchpad_bytes;
} slot;

/* The current product, cut into `slices` slices of `slice` outputs, or of `slice` rows when
 * `by_rows` (the last may be shorter). `whole` and `last` are its slices' oneDNN primitives
 * (NULL for BLIS). */
typedef struct product_job {
  const kvl_matrix *w;
  float *y;
  const float *x;
  int32_t rows, by_rows;
  int32_t extent, slice, slices; /* the rows or outputs cut, and the cut */
  float beta;
  slice_primitive *whole, *last;
  int failed; /* a oneDNN call failed */
} product_job;

struct kvl_products;

typedef struct worker {
  struct kvl_products *owner;
  int32_t slot;
} worker;

/* Threads that live as long as the engine and help the calling thread with its products.
 * Starting a thread per product cost more than a decode step's layer products
 * take. A product's slices are claimed through `claim`: bits 20.. its number of slices, bits
 * 0..19 the next slice. A claim past the slice count gets nothing, and a thread that still
 * holds a valid claim keeps the product (and `job`) from changing until it has counted its
 * slice in `completed`, so a late helper never computes a slice of the wrong product. */
typedef struct product_pool {
  pthread_t threads[KVL_MAX_THREADS];
  worker workers_of[KVL_MAX_THREADS];
  int32_t workers;          /* threads started */
  pthread_mutex_t lock;
  pthread_cond_t wake;      /* a new product, or stop */
  pthread_cond_t finished;  /* the last slice of a product is done */
  product_job job;          /* the current product */
  uint64_t claim;
  int32_t completed;        /* slices of the current product done */
  unsigned generation;      /* bumped (under lock) for each product */
  int32_t sleepers;         /* workers waiting on `wake` */
  int resting;              /* set by kvl_products_rest: workers sleep without polling */
  int caller_sleeping;      /* the calling thread waits on `finished` */
  int stop;
} product_pool;

struct kvl_products {
  const kvl_model *model;
  int32_t threads; /* the calling one and the pool's */
  int32_t max_rows;
  product_pool pool;
  int pool_ready;  /* the pool's lock and condition variables exist */
  slot slots[KVL_MAX_THREADS]; /* 0: the calling thread; 1..: the workers */
  slice_primitive **primitives;
  int32_t n_primitives, cap_primitives;
};

/* ------------------------------------------------------------------ slicing */

static int32_t threads_wanted(void) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores < 1 ? 1 : cores > KVL_MAX_THREADS ? KVL_MAX_THREADS : (int32_t)cores;
}

static int32_t round_up(int32_t n, int32_t to) { return (n + to - 1) / to * to; }

/* How many slices a product of this many multiply-adds is cut into on `threads` threads. */
static int32_t slices_wanted(int32_t threads, double muladds) {
  int32_t chunks = 1;
  if (threads > 1 && muladds >= KVL_SPLIT_MULADDS) {
    const double wanted = muladds / KVL_SLICE_MULADDS;
    chunks = wanted > threads * KVL_SLICES_PER_THREAD ? threads * KVL_SLICES_PER_THREAD
                                                      : (int32_t)wanted;
    if (chunks < threads) chunks = threads;
  }
  return chunks;
}

/* Whether a oneDNN product is cut into slices of rows rather than of outputs. */
static int cut_by_rows(int32_t rows, int32_t in, int32_t out) {
  return rows >= KVL_ROW_SLICES_MIN_ROWS &&
         (double)in * out * sizeof(float) <= KVL_ROW_SLICES_MAX_WEIGHT_BYTES;
}

/* The rows or outputs per slice of a product on `threads` threads: the one rule of the cut. */
static int32_t slice_size(int onednn, int32_t threads, int32_t rows, int32_t in, int32_t out) {
  const int32_t chunks = slices_wanted(threads, (double)rows * in * out);
  int32_t slice, cap;
  if (!onednn) return round_up((out + chunks - 1) / chunks, 16);
  if (cut_by_rows(rows, in, out)) return (rows + chunks - 1) / chunks;
  slice = round_up((out + chunks - 1) / chunks, KVL_BLOCK_OUT);
  cap = KVL_SLICE_FLOATS / rows / KVL_BLOCK_OUT * KVL_BLOCK_OUT;
  if (cap < KVL_BLOCK_OUT) cap = KVL_BLOCK_OUT;
  return slice < cap ? slice : cap;
}

/* Floats of each thread's slice buffer for m's products of up to max_rows rows: the largest
 * slice of outputs slice_size can cut, rows x min(the widest matrix, the cap). */
static size_t slot_floats_for(const kvl_model *m, int32_t max_rows) {
  const kvl_config *c = &m->config;
  int32_t widest = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
  size_t whole, capped;
  if (c->vocab_size > widest) widest = c->vocab_size;
  whole = (size_t)max_rows * (size_t)round_up(widest, KVL_BLOCK_OUT);
  capped = (size_t)max_rows * KVL_BLOCK_OUT;
  if (capped < KVL_SLICE_FLOATS) capped = KVL_SLICE_FLOATS;
  return whole < capped ? whole : capped;
}

size_t kvl_products_buffer_bytes(const kvl_model *model, int32_t max_rows) {
  if (model->onednn == NULL) return 0;
  return (size_t)threads_wanted() * slot_floats_for(model, max_rows) * sizeof(float);
}

/* ------------------------------------------------------------------ the model's weights */

/* The blocked layout of a [in, out] weight (oneDNN's dims: K = in, N = out). */
static dnnl_status_t blocked_desc(dnnl_memory_desc_t *md, int32_t in, int32_t out) {
  dnnl_dims_t dims = {in, out};
  return dnnl_memory_desc_init_by_tag(md, 2, dims, dnnl_f32, dnnl_BA16a64b);
}

static size_t blocked_floats(int32_t in, int32_t out) {
  return (size_t)round_up(out, KVL_BLOCK_OUT) * (size_t)round_up(in, KVL_BLOCK_IN);
}

/* Whether oneDNN's matmul of this shape picks the blocked layout itself, i.e. has a kernel
 * that reads it (brgemm), for a decode step's few rows and a prefill's many. */
static int prefers_blocked(dnnl_engine_t engine, int32_t in, int32_t out) {
  static const int32_t rows_probed[] = {1, 256};
  size_t i;
  for (i = 0; i < sizeof rows_probed / sizeof rows_probed[0]; ++i) {
    dnnl_memory_desc_t src, any, dst, blocked;
    dnnl_dims_t src_dims = {rows_probed[i], in}, w_dims = {in, out}, dst_dims = {rows_probed[i], out};
    dnnl_matmul_desc_t op;
    dnnl_primitive_desc_t pd;
    const dnnl_memory_desc_t *chosen;
    int same;
    if (dnnl_memory_desc_init_by_tag(&src, 2, src_dims, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&any, 2, w_dims, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dst, 2, dst_dims, dnnl_f32, dnnl_ab) != dnnl_success ||
        blocked_desc(&blocked, in, out) != dnnl_success ||
        dnnl_memory_desc_get_size(&blocked) != blocked_floats(in, out) * sizeof(float) ||
        dnnl_matmul_desc_init(&op, &src, &any, NULL, &dst) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &op, NULL, engine, NULL) != dnnl_success) {
      return 0;
    }
    chosen = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    same = chosen != NULL && dnnl_memory_desc_equal(chosen, &blocked);
    dnnl_primitive_desc_destroy(pd);
    if (!same) return 0;
  }
  return 1;
}

/* Reorders W ([out, in] row-major, oneDNN's "ba" for dims [in, out]) into `to`. */
static int reorder_to_blocked(dnnl_engine_t engine, dnnl_stream_t stream, const kvl_matrix *m,
                              float *to) {
  dnnl_memory_desc_t plain_md, blocked_md;
  dnnl_dims_t dims = {m->in, m->out};
  dnnl_memory_t plain = NULL, blocked = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t reorder = NULL;
  int ok = dnnl_memory_desc_init_by_tag(&plain_md, 2, dims, dnnl_f32, dnnl_ba) == dnnl_success &&
           blocked_desc(&blocked_md, m->in, m->out) == dnnl_success &&
           dnnl_memory_create(&plain, &plain_md, engine, (void *)m->w) == dnnl_success &&
           dnnl_memory_create(&blocked, &blocked_md, engine, to) == dnnl_success &&
           dnnl_reorder_primitive_desc_create(&pd, &plain_md, engine, &blocked_md, engine, NULL) ==
               dnnl_success &&
           dnnl_primitive_create(&reorder, pd) == dnnl_success;
  if (ok) {
    dnnl_exec_arg_t args[2];
    args[0].arg = DNNL_ARG_FROM;
    args[0].memory = plain;
    args[1].arg = DNNL_ARG_TO;
    args[1].memory = blocked;
    ok = dnnl_primitive_execute(reorder, stream, 2, args) == dnnl_success &&
         dnnl_stream_wait(stream) == dnnl_success;
  }
  dnnl_primitive_destroy(reorder);
  dnnl_primitive_desc_destroy(pd);
  dnnl_memory_destroy(blocked);
  dnnl_memory_destroy(plain);
  return ok;
}

static void onednn_free(struct kvl_onednn *o) {
  if (o == NULL) return;
  if (o->engine != NULL) dnnl_engine_destroy(o->engine);
  free(o->blocked);
  free(o);
}

void kvl_weights_free(kvl_model *m) {
  onednn_free(m->onednn);
  m->onednn = NULL;
  free(m->matrices);
  m->matrices = NULL;
}

/* Blocks every matrix of m for oneDNN. Returns 1 on success, 0 where oneDNN has no blocked
 * kernel for one of the shapes, -1 on an error (message written). */
static int prepare_onednn(kvl_model *m, int32_t count, char *error, size_t error_size) {
  struct kvl_onednn *o = (struct kvl_onednn *)calloc(1, sizeof *o);
  dnnl_stream_t stream = NULL;
  size_t total = 0, offset = 0;
  int32_t i, saved_threads;
  int ok;
  if (o == NULL) return kvl_fail(error, error_size, "out of host memory");
  if (dnnl_engine_create(&o->engine, dnnl_cpu, 0) != dnnl_success) {
    onednn_free(o);
    return kvl_fail(error, error_size, "oneDNN: no CPU engine");
  }
  for (i = 0; i < count; ++i) {
    const kvl_matrix *x = &m->matrices[i];
    int32_t j;
    for (j = 0; j < i && (m->matrices[j].in != x->in || m->matrices[j].out != x->out); ++j) {
    }
    total += blocked_floats(x->in, x->out);
    if (j < i) continue; /* this shape was probed */
    if (!prefers_blocked(o->engine, x->in, x->out)) {
      onednn_free(o);
      return 0;
    }
  }
  o->blocked = (float *)malloc(total * sizeof(float));
  if (o->blocked == NULL) {
    onednn_free(o);
    return kvl_fail(error, error_size, "out of host memory blocking %llu bytes of weights",
                    (unsigned long long)(total * sizeof(float)));
  }
  saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  ok = dnnl_stream_create(&stream, o->engine, dnnl_stream_default_flags) == dnnl_success;
  for (i = 0; ok && i < count; ++i) {
    kvl_matrix *x = &m->matrices[i];
    ok = reorder_to_blocked(o->engine, stream, x, o->blocked + offset);
    x->blocked = o->blocked + offset;
    offset += blocked_floats(x->in, x->out);
  }
  if (stream != NULL) dnnl_stream_destroy(stream);
  omp_set_num_threads(saved_threads);
  if (!ok) {
    for (i = 0; i < count; ++i) m->matrices[i].blocked = NULL;
    onednn_free(o);
    return kvl_fail(error, error_size, "oneDNN: reordering the weights failed");
  }
  m->onednn = o;
  return 1;
}

int kvl_weights_prepare(kvl_model *m, char *error, size_t error_size) {
  const kvl_config *c = &m->config;
  const int32_t dim = c->dim, kv = m->kv_dim, hidden = c->hidden_dim;
  const int32_t count = c->n_layers * KVL_LAYER_MATRICES + 1;
  const char *forced = getenv("KVL_MATMUL");
  int32_t l, found;
  if (forced != NULL && forced[0] != '\0' && strcmp(forced, "blis") != 0 &&
      strcmp(forced, "onednn") != 0) {
    return kvl_fail(error, error_size, "KVL_MATMUL=%s: expected blis or onednn", forced);
  }
  m->matrices = (kvl_matrix *)calloc((size_t)count, sizeof *m->matrices);
  if (m->matrices == NULL) return kvl_fail(error, error_size, "out of host memory");
  for (l = 0; l < c->n_layers; ++l) {
    kvl_matrix *x = m->matrices + (size_t)l * KVL_LAYER_MATRICES;
    x[KVL_WQ] = (kvl_matrix){m->wq + (size_t)l * dim * dim, NULL, dim, dim};
    x[KVL_WK] = (kvl_matrix){m->wk + (size_t)l * kv * dim, NULL, dim, kv};
    x[KVL_WV] = (kvl_matrix){m->wv + (size_t)l * kv * dim, NULL, dim, kv};
    x[KVL_WO] = (kvl_matrix){m->wo + (size_t)l * dim * dim, NULL, dim, dim};
    x[KVL_W1] = (kvl_matrix){m->w1 + (size_t)l * hidden * dim, NULL, dim, hidden};
    x[KVL_W2] = (kvl_matrix){m->w2 + (size_t)l * dim * hidden, NULL, hidden, dim};
    x[KVL_W3] = (kvl_matrix){m->w3 + (size_t)l * hidden * dim, NULL, dim, hidden};
  }
  m->matrices[count - 1] = (kvl_matrix){m->wcls, NULL, dim, c->vocab_size};
  if (forced != NULL && strcmp(forced, "blis") == 0) return 0;
  found = prepare_onednn(m, count, error, error_size);
  if (found < 0) {
    kvl_weights_free(m);
    return -1;
  }
  if (found == 0 && forced != NULL && strcmp(forced, "onednn") == 0) {
    kvl_weights_free(m);
    return kvl_fail(error, error_size,
                    "KVL_MATMUL=onednn: oneDNN has no kernel for blocked weights on this CPU "
                    "(it needs AVX-512)");
  }
  return 0;
}

const char *kvl_model_matmul(const kvl_model *model) {
  return model == NULL ? NULL : model->onednn != NULL ? "onednn" : "blis";
}

/* ------------------------------------------------------------------ oneDNN primitives */

static void slice_primitive_free(slice_primitive *s) {
  int32_t i;
  if (s == NULL) return;
  for (i = 0; i < KVL_MAX_THREADS; ++i) {
    dnnl_memory_destroy(s->src[i]);
    dnnl_memory_destroy(s->weights[i]);
    dnnl_memory_destroy(s->dst[i]);
    dnnl_memory_destroy(s->scratchpad[i]);
  }
  dnnl_primitive_destroy(s->primitive);
  free(s);
}

/* A new primitive for [rows, in] x [in, count] into a dense [rows, count], with memory
 * objects for each of the products' threads (their data set per call). */
static slice_primitive *slice_primitive_create(kvl_products *p, int32_t rows, int32_t in,
                                               int32_t count, int32_t accumulate,
                                               size_t *scratchpad_bytes) {
  dnnl_engine_t engine = p->model->onednn->engine;
  slice_primitive *s = (slice_primitive *)calloc(1, sizeof *s);
  dnnl_memory_desc_t src, weights, dst, scratch;
  dnnl_dims_t src_dims = {rows, in}, dst_dims = {rows, count};
  dnnl_matmul_desc_t op;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post_ops = NULL;
  dnnl_primitive_desc_t pd = NULL;
  int32_t i;
  int ok;
  if (s == NULL) return NULL;
  s->rows = rows;
  s->in = in;
  s->count = count;
  s->accumulate = accumulate;
  ok = dnnl_memory_desc_init_by_tag(&src, 2, src_dims, dnnl_f32, dnnl_ab) == dnnl_success &&
       blocked_desc(&weights, in, count) == dnnl_success &&
       dnnl_memory_desc_init_by_tag(&dst, 2, dst_dims, dnnl_f32, dnnl_ab) == dnnl_success &&
       dnnl_matmul_desc_init(&op, &src, &weights, NULL, &dst) == dnnl_success &&
       dnnl_primitive_attr_create(&attr) == dnnl_success &&
       dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
       (!accumulate ||
        (dnnl_post_ops_create(&post_ops) == dnnl_success &&
         dnnl_post_ops_append_sum(post_ops, 1.0f) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, post_ops) == dnnl_success)) &&
       dnnl_primitive_desc_create(&pd, &op, attr, engine, NULL) == dnnl_success &&
       dnnl_primitive_create(&s->primitive, pd) == dnnl_success;
  if (ok) {
    scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    *scratchpad_bytes = dnnl_memory_desc_get_size(&scratch);
  }
  for (i = 0; ok && i < p->threads; ++i) {
    ok = dnnl_memory_create(&s->src[i], &src, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&s->weights[i], &weights, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&s->dst[i], &dst, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         (*scratchpad_bytes == 0 ||
          dnnl_memory_create(&s->scratchpad[i], &scratch, engine, DNNL_MEMORY_NONE) ==
              dnnl_success);
  }
  dnnl_primitive_desc_destroy(pd);
  if (post_ops != NULL) dnnl_post_ops_destroy(post_ops);
  dnnl_primitive_attr_destroy(attr);
  if (!ok) {
    slice_primitive_free(s);
    return NULL;
  }
  return s;
}

/* The primitive of this slice shape, created on first use; NULL when that fails. Runs on the
 * calling thread only, while the workers are idle (it may grow their scratchpads). */
static slice_primitive *slice_primitive_for(kvl_products *p, int32_t rows, int32_t in,
                                            int32_t count, int32_t accumulate) {
  slice_primitive *s;
  size_t scratchpad_bytes = 0;
  int32_t i;
  for (i = 0; i < p->n_primitives; ++i) {
    s = p->primitives[i];
    if (s->rows == rows && s->in == in && s->count == count && s->accumulate == accumulate) {
      return s;
    }
  }
  if (p->n_primitives == p->cap_primitives) {
    const int32_t cap = p->cap_primitives ? 2 * p->cap_primitives : 16;
    slice_primitive **grown =
        (slice_primitive **)realloc(p->primitives, (size_t)cap * sizeof *grown);
    if (grown == NULL) return NULL;
    p->primitives = grown;
    p->cap_primitives = cap;
  }
  s = slice_primitive_create(p, rows, in, count, accumulate, &scratchpad_bytes);
  if (s == NULL) return NULL;
  for (i = 0; i < p->threads; ++i) {
    slot *t = &p->slots[i];
    if (t->scratchpad_bytes < scratchpad_bytes) {
      void *grown = realloc(t->scratchpad, scratchpad_bytes);
      if (grown == NULL) {
        slice_primitive_free(s);
        return NULL;
      }
      t->scratchpad = grown;
      t->scratchpad_bytes = scratchpad_bytes;
    }
  }
  p->primitives[p->n_primitives++] = s;
  return s;
}

/* ------------------------------------------------------------------ one slice */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Outputs [first, first + count) of a BLIS job, written in place. */
static void compute_slice_blis(const product_job *job, int32_t first, int32_t count) {
  const kvl_matrix *w = job->w;
  float one = 1.0f, beta = job->beta;
  rntm_t serial = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(1, &serial);
  bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, job->rows, count, w->in, &one, (float *)job->x,
               w->in, 1, (float *)w->w + (size_t)first * w->in, w->in, 1, &beta, job->y + first,
               w->out, 1, NULL, &serial);
}

/* Slice [first, first + count) of a oneDNN job on thread `index`'s slot. Slices of rows: x's
 * and y's rows by all of W, in place. Slices of outputs: all rows by W's 64-output blocks from
 * `first`, into the thread's buffer, then copied (or added) into y. */
static void compute_slice_onednn(kvl_products *p, int32_t index, product_job *job, int32_t first,
                                 int32_t count) {
  const kvl_matrix *w = job->w;
  slot *t = &p->slots[index];
  slice_primitive *s = count == job->slice ? job->whole : job->last;
  const float *src = job->by_rows ? job->x + (size_t)first * w->in : job->x;
  const float *weights =
      job->by_rows ? w->blocked
                   : w->blocked + (size_t)(first / KVL_BLOCK_OUT) *
                                      blocked_floats(w->in, KVL_BLOCK_OUT);
  float *dst = job->by_rows ? job->y + (size_t)first * w->out : t->out;
  dnnl_exec_arg_t args[4];
  int n_args = 3, ok;
  int32_t r;
  args[0].arg = DNNL_ARG_SRC;
  args[0].memory = s->src[index];
  args[1].arg = DNNL_ARG_WEIGHTS;
  args[1].memory = s->weights[index];
  args[2].arg = DNNL_ARG_DST;
  args[2].memory = s->dst[index];
  ok = dnnl_memory_set_data_handle(s->src[index], (void *)src) == dnnl_success &&
       dnnl_memory_set_data_handle(s->weights[index], (void *)weights) == dnnl_success &&
       dnnl_memory_set_data_handle(s->dst[index], dst) == dnnl_success;
  if (ok && s->scratchpad[index] != NULL) {
    args[3].arg = DNNL_ARG_SCRATCHPAD;
    args[3].memory = s->scratchpad[index];
    n_args = 4;
    ok = dnnl_memory_set_data_handle(s->scratchpad[index], t->scratchpad) == dnnl_success;
  }
  if (!ok || dnnl_primitive_execute(s->primitive, t->stream, n_args, args) != dnnl_success) {
    __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  if (job->by_rows) return;
  for (r = 0; r < job->rows; ++r) {
    float *y = job->y + (size_t)r * w->out + first;
    const float *from = t->out + (size_t)r * count;
    int32_t j;
    if (job->beta == 0.0f) {
      memcpy(y, from, (size_t)count * sizeof(float));
    } else {
      for (j = 0; j < count; ++j) y[j] += from[j];
    }
  }
}

/* Slice [first, first + count) of the job (outputs, or rows when by_rows) on thread `index`. */
static void compute_slice(kvl_products *p, int32_t index, product_job *job, int32_t first,
                          int32_t count) {
  if (job->whole == NULL) {
    compute_slice_blis(job, first, count);
  } else {
    compute_slice_onednn(p, index, job, first, count);
  }
}

/* ------------------------------------------------------------------ the pool */

#define KVL_CLAIM_BITS 20
#define KVL_CLAIM_MASK ((UINT64_C(1) << KVL_CLAIM_BITS) - 1)

/* Claims and computes slices of the current product until none is left. */
static void compute_slices(kvl_products *p, int32_t index) {
  product_pool *pool = &p->pool;
  for (;;) {
    const uint64_t ticket = __atomic_fetch_add(&pool->claim, 1, __ATOMIC_ACQ_REL);
    const int32_t n = (int32_t)((ticket >> KVL_CLAIM_BITS) & KVL_CLAIM_MASK);
    const int32_t slice = (int32_t)(ticket & KVL_CLAIM_MASK);
    product_job *job = &pool->job;
    int32_t first, count;
    if (slice >= n) return;
    first = slice * job->slice;
    count = job->extent - first < job->slice ? job->extent - first : job->slice;
    compute_slice(p, index, job, first, count);
    if (__atomic_add_fetch(&pool->completed, 1, __ATOMIC_ACQ_REL) == n) {
      pthread_mutex_lock(&pool->lock);
      if (pool->caller_sleeping) pthread_cond_signal(&pool->finished);
      pthread_mutex_unlock(&pool->lock);
    }
  }
}

static void *pool_worker(void *arg) {
  const worker *self = (const worker *)arg;
  product_pool *pool = &self->owner->pool;
  unsigned seen = 0;
  omp_set_num_threads(1); /* this thread's oneDNN calls start no OpenMP team */
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
    compute_slices(self->owner, self->slot);
  }
}

/* Starts up to `count` workers; the pool then has as many as started. Returns 0 when its lock
 * or condition variables could not be created (the products then run on the caller alone). */
static int pool_start(kvl_products *p, int32_t count) {
  product_pool *pool = &p->pool;
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
    pool->workers_of[i].owner = p;
    pool->workers_of[i].slot = i + 1;
    if (pthread_create(&pool->threads[i], NULL, pool_worker, &pool->workers_of[i]) != 0) break;
    ++pool->workers;
  }
  return 1;
}

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

/* Runs the job on the calling thread and whichever workers join in; returns once every slice
 * is done. */
static void pool_run(kvl_products *p, const product_job *job) {
  product_pool *pool = &p->pool;
  int polls;
  pool->job = *job;
  __atomic_store_n(&pool->completed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&pool->resting, 0, __ATOMIC_RELAXED);
  pthread_mutex_lock(&pool->lock);
  __atomic_store_n(&pool->claim, (uint64_t)job->slices << KVL_CLAIM_BITS, __ATOMIC_RELEASE);
  __atomic_store_n(&pool->generation, pool->generation + 1, __ATOMIC_RELEASE);
  if (pool->sleepers > 0) pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  compute_slices(p, 0);
  for (polls = 0; polls < KVL_SPIN_POLLS &&
                  __atomic_load_n(&pool->completed, __ATOMIC_ACQUIRE) < job->slices;
       ++polls) {
    cpu_relax();
  }
  pthread_mutex_lock(&pool->lock);
  pool->caller_sleeping = 1;
  while (__atomic_load_n(&pool->completed, __ATOMIC_ACQUIRE) < job->slices) {
    pthread_cond_wait(&pool->finished, &pool->lock);
  }
  pool->caller_sleeping = 0;
  pthread_mutex_unlock(&pool->lock);
}

/* ------------------------------------------------------------------ the engine's products */

void kvl_products_free(kvl_products *p) {
  int32_t i;
  if (p == NULL) return;
  if (p->pool_ready) pool_stop(&p->pool);
  for (i = 0; i < p->n_primitives; ++i) slice_primitive_free(p->primitives[i]);
  free(p->primitives);
  for (i = 0; i < KVL_MAX_THREADS; ++i) {
    if (p->slots[i].stream != NULL) dnnl_stream_destroy(p->slots[i].stream);
    free(p->slots[i].out);
    free(p->slots[i].scratchpad);
  }
  free(p);
}

int kvl_products_create(const kvl_model *model, int32_t max_rows, kvl_products **out,
                        char *error, size_t error_size) {
  kvl_products *p = (kvl_products *)calloc(1, sizeof *p);
  const int32_t wanted = threads_wanted();
  int32_t i;
  if (p == NULL) return kvl_fail(error, error_size, "out of host memory");
  p->model = model;
  p->max_rows = max_rows;
  p->threads = wanted;
  if (model->onednn != NULL) {
    const size_t floats = slot_floats_for(model, max_rows);
    for (i = 0; i < wanted; ++i) {
      p->slots[i].out = (float *)malloc(floats * sizeof(float));
      if (p->slots[i].out == NULL ||
          dnnl_stream_create(&p->slots[i].stream, model->onednn->engine,
                             dnnl_stream_default_flags) != dnnl_success) {
        kvl_products_free(p);
        return kvl_fail(error, error_size, "out of host memory for the products' buffers");
      }
    }
  }
  p->pool_ready = pool_start(p, wanted - 1);
  p->threads = 1 + p->pool.workers;
  *out = p;
  return 0;
}

void kvl_products_rest(kvl_products *p) {
  if (p->pool_ready) __atomic_store_n(&p->pool.resting, 1, __ATOMIC_RELAXED);
}

/* Fills job's cut and, for oneDNN, its slices' primitives (adding to y when `accumulate`;
 * a slice of outputs adds its buffer itself). */
static int prepare_job(kvl_products *p, const kvl_matrix *w, int32_t rows, int32_t accumulate,
                       product_job *job) {
  const int onednn = w->blocked != NULL;
  int32_t last;
  memset(job, 0, sizeof *job);
  job->w = w;
  job->rows = rows;
  job->by_rows = onednn && cut_by_rows(rows, w->in, w->out);
  job->extent = job->by_rows ? rows : w->out;
  job->slice = slice_size(onednn, p->pool_ready ? p->threads : 1, rows, w->in, w->out);
  job->slices = (job->extent + job->slice - 1) / job->slice;
  if (!onednn) return 0;
  last = job->extent - (job->slices - 1) * job->slice;
  if (job->by_rows) {
    job->whole = slice_primitive_for(p, job->slice, w->in, w->out, accumulate);
    job->last = last == job->slice ? job->whole
                                   : slice_primitive_for(p, last, w->in, w->out, accumulate);
  } else {
    job->whole = slice_primitive_for(p, rows, w->in, job->slice, 0);
    job->last = last == job->slice ? job->whole : slice_primitive_for(p, rows, w->in, last, 0);
  }
  return job->whole != NULL && job->last != NULL ? 0 : -1;
}

int kvl_products_prepare(kvl_products *p, int32_t rows, const kvl_matrix *w, char *error,
                         size_t error_size) {
  product_job job;
  /* A cut by rows has a primitive for each of beta 0 and 1; a cut by outputs adds itself. */
  if (rows > p->max_rows || prepare_job(p, w, rows, 0, &job) != 0 ||
      (job.by_rows && prepare_job(p, w, rows, 1, &job) != 0)) {
    return kvl_fail(error, error_size,
                    "oneDNN: no matrix product of %d rows by [%d, %d] (out of memory?)", (int)rows,
                    (int)w->in, (int)w->out);
  }
  return 0;
}

int kvl_product(kvl_products *p, const kvl_matrix *w, float *y, const float *x, int32_t rows,
                float beta) {
  product_job job;
  int32_t i, saved_threads = 1;
  if (rows > p->max_rows || prepare_job(p, w, rows, beta != 0.0f, &job) != 0) return -1;
  job.y = y;
  job.x = x;
  job.beta = beta;
  if (job.whole != NULL) {
    saved_threads = omp_get_max_threads();
    if (saved_threads != 1) omp_set_num_threads(1);
  }
  if (job.slices == 1 || !p->pool_ready) {
    for (i = 0; i < job.slices; ++i) {
      const int32_t first = i * job.slice;
      compute_slice(p, 0, &job, first,
                    job.extent - first < job.slice ? job.extent - first : job.slice);
    }
  } else {
    pool_run(p, &job);
    job.failed = __atomic_load_n(&p->pool.job.failed, __ATOMIC_RELAXED);
  }
  if (saved_threads != 1) omp_set_num_threads(saved_threads);
  return job.failed ? -1 : 0;
}
