/*
 * Internal declarations of kvc_llama shared by model.c, engine.c and tokenizer.c.
 * Not installed; users include llama.h only.
 */
#ifndef KVC_LLAMA_INTERNAL_H
#define KVC_LLAMA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "llama.h"

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
};

/** Checks a configuration's dimensions; `source` starts the message. */
int kvl_model_check_config(const kvl_config *c, const char *source, char *error,
                           size_t error_size);
/** A model of this (checked) configuration with uninitialised weights, bos 1 and eos 2. */
int kvl_model_allocate(const kvl_config *config, kvl_model **out, char *error, size_t error_size);
/** Loads a GGUF file of the llama architecture (model_gguf.c). */
int kvl_model_load_gguf(const char *path, kvl_model **out_model, char *error, size_t error_size);

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
