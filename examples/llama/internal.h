/*
 * Internal declarations of kvc_llama shared by its model loaders, engine.c, products.c and
 * tokenizer.c. Not installed; users include llama.h only.
 */
#ifndef KVC_LLAMA_INTERNAL_H
#define KVC_LLAMA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "llama.h"

/** The matrices of a layer, in the order of kvl_model::matrices. */
enum { KVL_WQ, KVL_WK, KVL_WV, KVL_WO, KVL_W1, KVL_W2, KVL_W3, KVL_LAYER_MATRICES };

/** One weight matrix as the matrix products read it (products.c). */
typedef struct kvl_matrix {
  const float *w;       /* [out, in] row-major: a view into kvl_model::storage */
  const float *blocked; /* the same in oneDNN's blocked layout, or NULL: products by BLIS */
  int32_t in, out;
} kvl_matrix;

/** Weights of one model, all views into one allocation (`storage`), llama2.c layout:
 * every matrix is row-major [out, in]. */
struct kvl_model {
  kvl_config config;
  int32_t head_dim; /* dim / n_heads */
  int32_t kv_dim;   /* n_kv_heads * head_dim */
  float *storage;
  const float *token_embedding; /* [vocab, dim] */
  const float *rms_att;         /* [layers, dim] */
  const float *wq;              /* [layers, dim, dim] */
  const float *wk;              /* [layers, kv_dim, dim] */
  const float *wv;              /* [layers, kv_dim, dim] */
  const float *wo;              /* [layers, dim, dim] */
  const float *rms_ffn;         /* [layers, dim] */
  const float *w1;              /* [layers, hidden_dim, dim] */
  const float *w2;              /* [layers, dim, hidden_dim] */
  const float *w3;              /* [layers, hidden_dim, dim] */
  const float *rms_final;       /* [dim] */
  const float *wcls;            /* [vocab, dim]; the embedding when shared */
  int32_t bos;                  /* the token windows start with, -1: none (see llama.h) */
  int32_t eos;                  /* the token that ends a text, -1: none */
  /* Set by kvl_weights_prepare once the weights are in place: the layers' matrices
   * ([layers * KVL_LAYER_MATRICES], KVL_WQ..KVL_W3 each), then the classifier; and oneDNN's
   * state with the blocked copies, NULL when the products use BLIS. */
  kvl_matrix *matrices;
  struct kvl_onednn *onednn;
};

/** Checks a configuration's dimensions; `source` starts the message. */
int kvl_model_check_config(const kvl_config *c, const char *source, char *error,
                           size_t error_size);
/** A model of this (checked) configuration with uninitialised weights, bos 1 and eos 2. */
int kvl_model_allocate(const kvl_config *config, kvl_model **out, char *error, size_t error_size);
/** Loads a GGUF file of the llama architecture (model_gguf.c). */
int kvl_model_load_gguf(const char *path, kvl_model **out_model, char *error, size_t error_size);

/* products.c: the matrix products y[rows, out] = x[rows, in] W^T (+ y). */

/** Chooses the products' library for m (oneDNN where it has AVX-512 kernels for blocked
 * weights, else BLIS; KVL_MATMUL=blis|onednn forces one) and fills m->matrices, blocking the
 * weights for oneDNN. Called once the weights are in place; -1 with a message on failure. */
int kvl_weights_prepare(kvl_model *m, char *error, size_t error_size);
/** Frees what kvl_weights_prepare made (safe on a model it never ran on). */
void kvl_weights_free(kvl_model *m);

/** The products of one engine: its worker threads, per-thread buffers and oneDNN primitives.
 * Used by one thread at a time, like the engine. */
typedef struct kvl_products kvl_products;
int kvl_products_create(const kvl_model *model, int32_t max_rows, kvl_products **out,
                        char *error, size_t error_size);
void kvl_products_free(kvl_products *p);
/** Bytes of the per-thread buffers kvl_products_create allocates for max_rows rows. */
size_t kvl_products_buffer_bytes(const kvl_model *model, int32_t max_rows);
/** Makes sure a product of `rows` rows by w can run (creates its oneDNN primitives), so that
 * a forward pass fails before it stores anything; -1 with a message. */
int kvl_products_prepare(kvl_products *p, int32_t rows, const kvl_matrix *w, char *error,
                         size_t error_size);
/** y[rows, w->out] = x[rows, w->in] w^T, plus beta * y (beta 0 or 1); -1 if a library call
 * failed (y is then undefined). */
int kvl_product(kvl_products *p, const kvl_matrix *w, float *y, const float *x, int32_t rows,
                float beta);
/** Until the next product, the idle workers sleep instead of polling: the calling thread is
 * about to do other work (attention on kvcache's threads, or return to the caller). */
void kvl_products_rest(kvl_products *p);

/** Writes a printf-style message into error (if any) and returns -1. */
int kvl_fail(char *error, size_t error_size, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/** Turns a non-NULL kvcache status into the -1 + message convention ("<what>: <CODE>:
 * <message>") and frees it; returns 0 for NULL. */
int kvl_fail_status(kvc_status *status, char *error, size_t error_size, const char *what);

#endif /* KVC_LLAMA_INTERNAL_H */
