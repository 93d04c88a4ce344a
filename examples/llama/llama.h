/*
 * A small inference engine for llama2.c-format checkpoints that keeps all K/V and computes
 * all attention through the kvcache C API. Everything else an engine does (weights, RMSNorm,
 * RoPE, matrix products with a BLAS, SwiGLU, the classifier, tokenisation) lives here.
 *
 * Errors: functions returning int return 0 on success, or -1 with a message written into
 * `error` (at most error_size bytes, NUL-terminated). Objects are not thread-safe; use one
 * engine per thread.
 */
#ifndef KVC_LLAMA_H
#define KVC_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include <kvcache/kvcache.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Shape of a Llama model (the llama2.c header plus the constants it implies). */
typedef struct kvl_config {
  int32_t dim;
  int32_t hidden_dim;
  int32_t n_layers;
  int32_t n_heads;
  int32_t n_kv_heads;
  int32_t vocab_size;
  int32_t seq_len;
  int32_t shared_classifier; /* 1: the classifier is the token embedding */
  float rope_theta;          /* 10000 */
  float norm_eps;            /* 1e-5 */
} kvl_config;

typedef struct kvl_model kvl_model;

/** Loads a llama2.c "version 0" checkpoint, or a GGUF file (versions 2, 3) of the llama
 * architecture with F32, F16, Q8_0, Q4_0 or Q4_1 tensors (dequantised to f32). */
int kvl_model_load(const char *path, kvl_model **out_model, char *error, size_t error_size);
/** A model of the given shape with reproducible random weights (for benchmarks). */
int kvl_model_random(const kvl_config *config, uint64_t seed, kvl_model **out_model, char *error,
                     size_t error_size);
/** 1 if the file is a GGUF file (starts with "GGUF"), else 0. */
int kvl_model_is_gguf(const char *path);
const kvl_config *kvl_model_config(const kvl_model *model);
/** The library of the engine's matrix products for this model: "onednn" (weights blocked at
 * load, on CPUs with AVX-512) or "blis"; KVL_MATMUL=blis|onednn forces one at load. */
const char *kvl_model_matmul(const kvl_model *model);
/** The token a text starts with (llama2.c: 1), or -1 when the model has no BOS convention
 * (a GGUF file whose tokenizer.ggml.add_bos_token is false): texts then start at their first
 * token. */
int32_t kvl_model_bos(const kvl_model *model);
/** The token that ends a text (llama2.c: 2; GGUF: tokenizer.ggml.eos_token_id), or -1. */
int32_t kvl_model_eos(const kvl_model *model);
void kvl_model_free(kvl_model *model);

/** Fills cache parameters that match the model (layers, heads, head_dim); the caller then
 * sets dtype, layout, memory limit and policy. */
void kvl_cache_params_for(const kvl_model *model, kvc_cache_params *params);

typedef struct kvl_engine kvl_engine;

/** An engine running `model` with its K/V in `cache` (borrowed; must match the model's shape)
 * for steps of at most max_batch_tokens tokens in all. */
int kvl_engine_create(const kvl_model *model, kvc_cache *cache, int32_t max_batch_tokens,
                      kvl_engine **out_engine, char *error, size_t error_size);
void kvl_engine_free(kvl_engine *engine);
/** Bytes of the activation buffers kvl_engine_create allocates for max_batch_tokens (all the
 * engine holds besides the model, the cache and the caller's logits), so that a caller can
 * budget them with the cache's memory; 0 for a NULL model, max_batch_tokens < 1 or a size past
 * SIZE_MAX. */
size_t kvl_engine_activation_bytes(const kvl_model *model, int32_t max_batch_tokens);

/**
 * One batched step. Sequence i (already created in the cache) contributes n_tokens[i] tokens
 * (a prompt chunk, or 1 when decoding); tokens and positions hold all of them concatenated.
 * Writes logits [n_seqs, vocab] for the last token of each sequence, or, when all_logits is
 * non-zero, [total tokens, vocab].
 */
int kvl_engine_forward(kvl_engine *engine, int32_t n_seqs, const int32_t *seq_ids,
                       const int32_t *n_tokens, const int32_t *tokens, const int32_t *positions,
                       int all_logits, float *logits, char *error, size_t error_size);
/**
 * kvl_engine_forward, with prompt_end ([n_seqs] or NULL: none marked) passed as
 * kvc_batch::prompt_end to every layer: an entry 1 marks sequence i's tokens as its prompt's
 * last chunk, so under a cache with prefill `once` each layer is compressed right after its
 * attention over them rather than at the first decode token (over a prompt prefilled in one
 * chunk only the layer being processed then holds the whole prompt, NVIDIA kvpress's way).
 * kvl_engine_forward is this call with NULL.
 */
int kvl_engine_forward_marked(kvl_engine *engine, int32_t n_seqs, const int32_t *seq_ids,
                              const int32_t *n_tokens, const int32_t *tokens,
                              const int32_t *positions, const int32_t *prompt_end, int all_logits,
                              float *logits, char *error, size_t error_size);

typedef struct kvl_tokenizer kvl_tokenizer;

/** Loads a llama2.c tokenizer file for a vocabulary of vocab_size pieces. */
int kvl_tokenizer_load(const char *path, int32_t vocab_size, kvl_tokenizer **out_tokenizer,
                       char *error, size_t error_size);
void kvl_tokenizer_free(kvl_tokenizer *tokenizer);
/** Encodes UTF-8 text (llama2.c BPE with byte fallback); returns the number of tokens written
 * (at most max_tokens), or -1 if they do not fit. bos/eos add token 1 / 2. */
int32_t kvl_tokenizer_encode(const kvl_tokenizer *tokenizer, const char *text, int bos, int eos,
                             int32_t *tokens, int32_t max_tokens);
/** The text of `token` following `previous` (llama2.c rules: a leading space is dropped after
 * BOS, "<0xNN>" pieces become that byte). Valid until the next call. */
const char *kvl_tokenizer_decode(const kvl_tokenizer *tokenizer, int32_t previous, int32_t token);

/** Reads the whole file at path: on success *out (release it with free()) holds its *out_size
 * bytes followed by a NUL; the error messages start with the path. */
int kvl_file_read(const char *path, char **out, size_t *out_size, char *error, size_t error_size);

/** Reads a text already encoded: whitespace-separated decimal token ids, each checked against
 * a vocabulary of vocab_size. On success *out_ids (release it with free()) holds *out_count
 * >= 1 ids; the error messages start with the path. */
int kvl_token_ids_read(const char *path, int32_t vocab_size, int32_t **out_ids,
                       int32_t *out_count, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KVC_LLAMA_H */
