/*
 * GPT-2-style byte-level BPE vocabularies read from GGUF files (tokenizer.ggml.model "gpt2"):
 * tokenizer.ggml.tokens, tokenizer.ggml.token_type and tokenizer.ggml.merges.
 *
 * Byte level: every byte of the text is written as one printable code point (GPT-2's
 * bytes_to_unicode: the bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the
 * other 68 bytes, in order, for U+0100 onwards; a space is 'Ġ', U+0120), and the pieces are
 * strings of such code points. Decoding maps them back to bytes; control tokens (type 3, such
 * as <|im_start|>) decode to their text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "gguf.h"
#include "internal.h"

enum { TOKEN_TYPE_CONTROL = 3 };

void kvl_bpe_byte_map(uint32_t byte_to_cp[256]) {
  int b, extra = 0;
  for (b = 0; b < 256; ++b) {
    const int self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    byte_to_cp[b] = self ? (uint32_t)b : (uint32_t)(256 + extra++);
  }
}

/* Decodes one UTF-8 code point at s[*at] (of n bytes); -1 for a malformed sequence. */
static int32_t next_code_point(const char *s, size_t n, size_t *at) {
  const unsigned char c = (unsigned char)s[*at];
  int len, i;
  int32_t cp;
  if (c < 0x80) {
    len = 1;
    cp = c;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return -1;
  }
  if (*at + (size_t)len > n) return -1;
  for (i = 1; i < len; ++i) {
    const unsigned char d = (unsigned char)s[*at + (size_t)i];
    if ((d & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (d & 0x3F);
  }
  *at += (size_t)len;
  return cp;
}

void kvl_bpe_free(kvl_bpe *b) {
  int32_t i;
  if (b == NULL) return;
  if (b->pieces != NULL) {
    for (i = 0; i < b->n_tokens; ++i) free(b->pieces[i]);
  }
  if (b->text != NULL) {
    for (i = 0; i < b->n_tokens; ++i) free(b->text[i]);
  }
  free(b->pieces);
  free(b->text);
  free(b->is_control);
  kvl_bpe_free_merges(b);
  free(b);
}

static char *copy_string(const char *data, size_t size) {
  char *s = (char *)malloc(size + 1);
  if (s == NULL) return NULL;
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* The bytes a byte-level piece stands for; NULL if it contains a code point that is no
 * byte's stand-in (the piece is then shown as it is). */
static char *piece_bytes(const uint32_t byte_to_cp[256], const char *piece, size_t n) {
  char *out = (char *)malloc(n + 1);
  size_t at = 0, k = 0;
  if (out == NULL) return NULL;
  while (at < n) {
    int32_t cp = next_code_point(piece, n, &at);
    int b;
    if (cp < 0) break;
    for (b = 0; b < 256 && byte_to_cp[b] != (uint32_t)cp; ++b) {
    }
    if (b == 256) break;
    out[k++] = (char)b;
  }
  if (at < n) {
    free(out);
    return copy_string(piece, n);
  }
  out[k] = '\0';
  return out;
}

int kvl_bpe_load(const char *path, int32_t vocab_size, kvl_bpe **out, char *error,
                 size_t error_size) {
  kvl_gguf *g = NULL;
  kvl_gguf_string model, *tokens = NULL;
  uint64_t n_tokens = 0, i;
  const kvl_gguf_kv *types;
  kvl_bpe *b = NULL;
  uint32_t byte_to_cp[256];

  if (kvl_gguf_open(path, &g, error, error_size) != 0) return -1;
  if (kvl_gguf_get_string(g, "tokenizer.ggml.model", &model, error, error_size) != 0) goto fail;
  if (!kvl_gguf_string_is(model, "gpt2")) {
    kvl_fail(error, error_size,
             "%s: unsupported tokenizer '%.*s' (tokenizer.ggml.model); only 'gpt2' (byte-level "
             "BPE) vocabularies are read from GGUF files",
             path, (int)(model.size < 64 ? model.size : 64), model.data);
    goto fail;
  }
  if (kvl_gguf_get_strings(g, "tokenizer.ggml.tokens", &tokens, &n_tokens, error, error_size) !=
      0) {
    goto fail;
  }
  if (n_tokens == 0 || n_tokens > (uint64_t)vocab_size) {
    kvl_fail(error, error_size,
             "%s: tokenizer.ggml.tokens has %llu tokens; the model's vocabulary has %d", path,
             (unsigned long long)n_tokens, (int)vocab_size);
    goto fail;
  }
  types = kvl_gguf_find(g, "tokenizer.ggml.token_type");
  if (types != NULL && (types->type != KVL_GGUF_ARRAY || types->array_size != n_tokens ||
                        (types->array_type != KVL_GGUF_INT32 &&
                         types->array_type != KVL_GGUF_UINT32))) {
    kvl_fail(error, error_size,
             "%s: tokenizer.ggml.token_type must be an array of %llu int32 values", path,
             (unsigned long long)n_tokens);
    goto fail;
  }
  b = (kvl_bpe *)calloc(1, sizeof *b);
  if (b == NULL) goto oom;
  b->n_tokens = (int32_t)n_tokens;
  b->bos = b->eos = -1;
  {
    int64_t v;
    if (kvl_gguf_find(g, "tokenizer.ggml.bos_token_id") != NULL) {
      if (kvl_gguf_get_int(g, "tokenizer.ggml.bos_token_id", 0, (int64_t)n_tokens - 1, &v, error,
                           error_size) != 0) {
        goto fail;
      }
      b->bos = (int32_t)v;
    }
    if (kvl_gguf_find(g, "tokenizer.ggml.eos_token_id") != NULL) {
      if (kvl_gguf_get_int(g, "tokenizer.ggml.eos_token_id", 0, (int64_t)n_tokens - 1, &v, error,
                           error_size) != 0) {
        goto fail;
      }
      b->eos = (int32_t)v;
    }
  }
  b->pieces = (char **)calloc((size_t)n_tokens, sizeof(char *));
  b->text = (char **)calloc((size_t)n_tokens, sizeof(char *));
  b->is_control = (unsigned char *)calloc((size_t)n_tokens, 1);
  if (b->pieces == NULL || b->text == NULL || b->is_control == NULL) goto oom;
  kvl_bpe_byte_map(byte_to_cp);
  for (i = 0; i < n_tokens; ++i) {
    const uint8_t *t = types != NULL ? types->value + 4 * i : NULL;
    b->is_control[i] = t != NULL && t[0] == TOKEN_TYPE_CONTROL && t[1] == 0 && t[2] == 0 &&
                       t[3] == 0;
    b->pieces[i] = copy_string(tokens[i].data, (size_t)tokens[i].size);
    b->text[i] = b->is_control[i] ? copy_string(tokens[i].data, (size_t)tokens[i].size)
                                  : piece_bytes(byte_to_cp, tokens[i].data, (size_t)tokens[i].size);
    if (b->pieces[i] == NULL || b->text[i] == NULL) goto oom;
  }
  if (kvl_bpe_load_merges(b, g, error, error_size) != 0) goto fail;
  free(tokens);
  kvl_gguf_close(g);
  *out = b;
  return 0;
oom:
  kvl_fail(error, error_size, "out of host memory");
fail:
  free(tokens);
  kvl_bpe_free(b);
  kvl_gguf_close(g);
  return -1;
}

const char *kvl_bpe_decode(const kvl_bpe *b, int32_t token) {
  if (token < 0 || token >= b->n_tokens) return "";
  return b->text[token];
}
