/*
 * Byte-level BPE vocabularies from GGUF files (tokenizer_bpe.c: loading and decoding;
 * bpe_encode.c: pre-tokenisation and merges). Internal to kvc_llama.
 */
#ifndef KVC_LLAMA_BPE_H
#define KVC_LLAMA_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct kvl_bpe_entry kvl_bpe_entry;

typedef struct kvl_bpe {
  int32_t n_tokens;
  int32_t bos, eos;          /* tokenizer.ggml.bos/eos_token_id, -1 when absent */
  char **pieces;             /* the byte-level strings of tokenizer.ggml.tokens */
  char **text;               /* what each token decodes to (NUL-terminated bytes) */
  unsigned char *is_control; /* token_type 3: never produced by merges */
  /* Encoding (bpe_encode.c): open-addressing hash tables. */
  kvl_bpe_entry *piece_table; /* piece string -> id */
  kvl_bpe_entry *merge_table; /* (left id, right id) -> rank, merged id */
  size_t piece_capacity, merge_capacity;
  int32_t byte_token[256]; /* the token of each single byte, -1 if none */
} kvl_bpe;

/** GPT-2's bytes_to_unicode: the code point standing for each byte. */
void kvl_bpe_byte_map(uint32_t byte_to_cp[256]);
int kvl_bpe_load(const char *path, int32_t vocab_size, kvl_bpe **out, char *error,
                 size_t error_size);
void kvl_bpe_free(kvl_bpe *bpe);
const char *kvl_bpe_decode(const kvl_bpe *bpe, int32_t token);

/** Reads tokenizer.ggml.merges into the tables (a file without merges cannot encode). */
int kvl_bpe_load_merges(kvl_bpe *bpe, const kvl_gguf *gguf, char *error, size_t error_size);
void kvl_bpe_free_merges(kvl_bpe *bpe);
/** Encodes UTF-8 text; returns the token count (at most max_tokens) or -1. */
int32_t kvl_bpe_encode(const kvl_bpe *bpe, const char *text, int32_t *tokens, int32_t max_tokens);

#endif /* KVC_LLAMA_BPE_H */
