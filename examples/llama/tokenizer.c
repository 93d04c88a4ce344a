/*
 * llama2.c's tokenizer: its file format, its BPE encode and its decode rules.
 *
 * File: int32 max_token_length, then per token a float32 score, an int32 length and that many
 * bytes (the piece). Token 1 is BOS, 2 is EOS, 3..258 are the byte-fallback pieces <0x00>..<0xFF>.
 *
 * Encode follows llama2.c's run.c: a dummy prefix " " when the text is not empty, one token per
 * UTF-8 code point found in the vocabulary (byte-fallback tokens for the others), then,
 * repeatedly, the adjacent pair whose concatenation is the best-scoring piece is merged (the
 * leftmost pair among equal scores). run.c rescans the whole text for every merge, O(n^2); here
 * a heap of candidate pairs with lazy invalidation makes the same merges in the same order in
 * O(n log n), so a whole book encodes in milliseconds.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "gguf.h"
#include "internal.h"

#define KVL_MAX_PIECE_BYTES (1 << 16)

typedef struct piece_index {
  const char *str;
  int32_t id;
} piece_index;

struct kvl_tokenizer {
  int32_t vocab_size;
  char **vocab; /* NUL-terminated pieces */
  float *scores;
  piece_index *sorted;   /* pieces in strcmp order, for lookups */
  size_t max_piece;      /* bytes of the longest piece */
  char byte_pieces[512]; /* byte b is the string at 2 * b */
  kvl_bpe *bpe;          /* a GGUF byte-level BPE vocabulary instead of llama2.c's */
};

static int compare_pieces(const void *a, const void *b) {
  return strcmp(((const piece_index *)a)->str, ((const piece_index *)b)->str);
}

static int32_t lookup(const kvl_tokenizer *t, const char *str) {
  size_t lo = 0, hi = (size_t)t->vocab_size;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int cmp = strcmp(str, t->sorted[mid].str);
    if (cmp == 0) return t->sorted[mid].id;
    if (cmp < 0) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return -1;
}

void kvl_tokenizer_free(kvl_tokenizer *t) {
  int32_t i;
  if (t == NULL) return;
  if (t->vocab != NULL) {
    for (i = 0; i < t->vocab_size; ++i) free(t->vocab[i]);
  }
  free(t->vocab);
  free(t->scores);
  free(t->sorted);
  kvl_bpe_free(t->bpe);
  free(t);
}

int kvl_tokenizer_load(const char *path, int32_t vocab_size, kvl_tokenizer **out_tokenizer,
                       char *error, size_t error_size) {
  FILE *f;
  kvl_tokenizer *t;
  int32_t max_token_length, i;
  if (path == NULL || out_tokenizer == NULL) {
    return kvl_fail(error, error_size,
                    "kvl_tokenizer_load: path and out_tokenizer must not be NULL");
  }
  if (kvl_gguf_is_gguf(path)) {
    t = (kvl_tokenizer *)calloc(1, sizeof *t);
    if (t == NULL) return kvl_fail(error, error_size, "out of host memory");
    t->vocab_size = vocab_size;
    if (kvl_bpe_load(path, vocab_size, &t->bpe, error, error_size) != 0) {
      kvl_tokenizer_free(t);
      return -1;
    }
    *out_tokenizer = t;
    return 0;
  }
  if (vocab_size < 259) {
    return kvl_fail(error, error_size,
                    "kvl_tokenizer_load: vocab_size must be >= 259 (BOS, EOS and 256 byte "
                    "pieces), got %d",
                    (int)vocab_size);
  }
  f = fopen(path, "rb");
  if (f == NULL) return kvl_fail(error, error_size, "%s: cannot open: %s", path, strerror(errno));
  t = (kvl_tokenizer *)calloc(1, sizeof *t);
  if (t == NULL) {
    fclose(f);
    return kvl_fail(error, error_size, "out of host memory");
  }
  t->vocab_size = vocab_size;
  t->vocab = (char **)calloc((size_t)vocab_size, sizeof(char *));
  t->scores = (float *)malloc((size_t)vocab_size * sizeof(float));
  t->sorted = (piece_index *)malloc((size_t)vocab_size * sizeof(piece_index));
  if (t->vocab == NULL || t->scores == NULL || t->sorted == NULL) {
    fclose(f);
    kvl_tokenizer_free(t);
    return kvl_fail(error, error_size, "out of host memory");
  }
  if (fread(&max_token_length, sizeof max_token_length, 1, f) != 1) {
    fclose(f);
    kvl_tokenizer_free(t);
    return kvl_fail(error, error_size, "%s: short file: no max_token_length header", path);
  }
  if (max_token_length <= 0 || max_token_length > KVL_MAX_PIECE_BYTES) {
    fclose(f);
    kvl_tokenizer_free(t);
    return kvl_fail(error, error_size,
                    "%s: bad header: max_token_length must be in 1..%d, got %d (not a llama2.c "
                    "tokenizer file?)",
                    path, KVL_MAX_PIECE_BYTES, (int)max_token_length);
  }
  for (i = 0; i < vocab_size; ++i) {
    int32_t len;
    if (fread(&t->scores[i], sizeof(float), 1, f) != 1 || fread(&len, sizeof len, 1, f) != 1) {
      fclose(f);
      kvl_tokenizer_free(t);
      return kvl_fail(error, error_size,
                      "%s: short file: it ends at token %d, but the model's vocabulary has %d",
                      path, (int)i, (int)vocab_size);
    }
    if (len < 0 || len > KVL_MAX_PIECE_BYTES) {
      fclose(f);
      kvl_tokenizer_free(t);
      return kvl_fail(error, error_size,
                      "%s: token %d has a bad length %d (not a llama2.c tokenizer file?)", path,
                      (int)i, (int)len);
    }
    t->vocab[i] = (char *)malloc((size_t)len + 1);
    if (t->vocab[i] == NULL) {
      fclose(f);
      kvl_tokenizer_free(t);
      return kvl_fail(error, error_size, "out of host memory");
    }
    if (len > 0 && fread(t->vocab[i], 1, (size_t)len, f) != (size_t)len) {
      fclose(f);
      kvl_tokenizer_free(t);
      return kvl_fail(error, error_size, "%s: short file: token %d is truncated", path, (int)i);
    }
    t->vocab[i][len] = '\0';
    if ((size_t)len > t->max_piece) t->max_piece = (size_t)len;
    t->sorted[i].str = t->vocab[i];
    t->sorted[i].id = i;
  }
  fclose(f);
  qsort(t->sorted, (size_t)vocab_size, sizeof(piece_index), compare_pieces);
  for (i = 0; i < 256; ++i) {
    t->byte_pieces[2 * i] = (char)(unsigned char)i;
    t->byte_pieces[2 * i + 1] = '\0';
  }
  *out_tokenizer = t;
  return 0;
}

/* ------------------------------------------------------------------ encode */

typedef struct symbol {
  int32_t id;
  int32_t prev, next; /* neighbours among the live symbols, -1 at the ends */
  uint32_t version;   /* bumped when the symbol changes, to invalidate queued pairs */
  int alive;
} symbol;

typedef struct candidate {
  float score;
  int32_t left, right, merged;
  uint32_t left_version, right_version;
} candidate;

/* Heap order: the higher score first; among equal scores the leftmost pair, as run.c's scan.
 * A symbol's index is where its first byte started, so index order is text order. */
static int before(const candidate *a, const candidate *b) {
  if (a->score != b->score) return a->score > b->score;
  return a->left < b->left;
}

static void heap_push(candidate *heap, size_t *n, candidate c) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!before(&c, &heap[parent])) break;
    heap[i] = heap[parent];
    i = parent;
  }
  heap[i] = c;
}

static candidate heap_pop(candidate *heap, size_t *n) {
  candidate top = heap[0], last = heap[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= *n) break;
    if (child + 1 < *n && before(&heap[child + 1], &heap[child])) ++child;
    if (!before(&heap[child], &last)) break;
    heap[i] = heap[child];
    i = child;
  }
  if (*n > 0) heap[i] = last;
  return top;
}

static void push_pair(const kvl_tokenizer *t, const symbol *s, int32_t left, char *buffer,
                      candidate *heap, size_t *n) {
  int32_t right, merged;
  size_t a;
  candidate c;
  if (left < 0 || (right = s[left].next) < 0) return;
  a = strlen(t->vocab[s[left].id]);
  memcpy(buffer, t->vocab[s[left].id], a);
  strcpy(buffer + a, t->vocab[s[right].id]);
  merged = lookup(t, buffer);
  if (merged < 0) return;
  c.score = t->scores[merged];
  c.left = left;
  c.right = right;
  c.merged = merged;
  c.left_version = s[left].version;
  c.right_version = s[right].version;
  heap_push(heap, n, c);
}

static int32_t encode_bpe(const kvl_tokenizer *t, const char *text, int bos, int eos,
                          int32_t *tokens, int32_t max_tokens) {
  const int32_t extra = (bos && t->bpe->bos >= 0 ? 1 : 0) + (eos && t->bpe->eos >= 0 ? 1 : 0);
  int32_t n, k = 0;
  if (max_tokens < extra) return -1;
  if (bos && t->bpe->bos >= 0) tokens[k++] = t->bpe->bos;
  n = kvl_bpe_encode(t->bpe, text, tokens + k, max_tokens - extra);
  if (n < 0) return -1;
  k += n;
  if (eos && t->bpe->eos >= 0) tokens[k++] = t->bpe->eos;
  return k;
}

int32_t kvl_tokenizer_encode(const kvl_tokenizer *t, const char *text, int bos, int eos,
                             int32_t *tokens, int32_t max_tokens) {
  size_t len, n = 0, heap_n = 0, i;
  symbol *s;
  candidate *heap;
  char *buffer;
  char code_point[8];
  size_t cp_len = 0;
  int32_t count = 0, at;
  if (t == NULL || text == NULL || (tokens == NULL && max_tokens > 0)) return -1;
  if (t->bpe != NULL) return encode_bpe(t, text, bos, eos, tokens, max_tokens);
  len = strlen(text);
  if (len > (size_t)INT32_MAX - 4) return -1;
  s = (symbol *)malloc((len + 1) * sizeof(symbol));
  heap = (candidate *)malloc((3 * len + 3) * sizeof(candidate));
  buffer = (char *)malloc(2 * t->max_piece + 1);
  if (s == NULL || heap == NULL || buffer == NULL) {
    free(s);
    free(heap);
    free(buffer);
    return -1;
  }

  if (len > 0) { /* the dummy prefix of SentencePiece's add_dummy_prefix */
    int32_t space = lookup(t, " ");
    s[n++].id = space >= 0 ? space : ' ' + 3;
  }
  for (i = 0; i < len; ++i) {
    /* Collect one UTF-8 code point (at most 4 bytes), exactly as run.c does. */
    if ((text[i] & 0xC0) != 0x80) cp_len = 0;
    code_point[cp_len++] = text[i];
    code_point[cp_len] = '\0';
    if ((text[i + 1] & 0xC0) == 0x80 && cp_len < 4) continue;
    {
      int32_t id = lookup(t, code_point);
      if (id >= 0) {
        s[n++].id = id;
      } else {
        size_t b;
        for (b = 0; b < cp_len; ++b) s[n++].id = (int32_t)(unsigned char)code_point[b] + 3;
      }
    }
    cp_len = 0;
  }
  for (i = 0; i < n; ++i) {
    s[i].prev = (int32_t)i - 1;
    s[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    s[i].version = 0;
    s[i].alive = 1;
  }
  for (i = 0; i + 1 < n; ++i) push_pair(t, s, (int32_t)i, buffer, heap, &heap_n);
  while (heap_n > 0) {
    candidate c = heap_pop(heap, &heap_n);
    symbol *l = &s[c.left], *r = &s[c.right];
    if (!l->alive || !r->alive || l->next != c.right || l->version != c.left_version ||
        r->version != c.right_version) {
      continue; /* stale: one side changed since the pair was queued */
    }
    l->id = c.merged;
    l->version++;
    l->next = r->next;
    if (r->next >= 0) s[r->next].prev = c.left;
    r->alive = 0;
    push_pair(t, s, l->prev, buffer, heap, &heap_n);
    push_pair(t, s, c.left, buffer, heap, &heap_n);
  }

  for (at = n > 0 ? 0 : -1; at >= 0; at = s[at].next) ++count;
  count += (bos ? 1 : 0) + (eos ? 1 : 0);
  if (count > max_tokens) {
    count = -1;
  } else {
    int32_t k = 0;
    if (bos) tokens[k++] = 1;
    for (at = n > 0 ? 0 : -1; at >= 0; at = s[at].next) tokens[k++] = s[at].id;
    if (eos) tokens[k++] = 2;
  }
  free(s);
  free(heap);
  free(buffer);
  return count;
}

/* ------------------------------------------------------------------ decode */

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

const char *kvl_tokenizer_decode(const kvl_tokenizer *t, int32_t previous, int32_t token) {
  const char *piece;
  if (t == NULL || token < 0 || token >= t->vocab_size) return "";
  if (t->bpe != NULL) return kvl_bpe_decode(t->bpe, token);
  piece = t->vocab[token];
  if (previous == 1 && piece[0] == ' ') ++piece; /* the dummy prefix after BOS */
  if (piece[0] == '<' && piece[1] == '0' && piece[2] == 'x' && piece[3] != '\0' &&
      piece[4] != '\0' && piece[5] == '>' && piece[6] == '\0') {
    int hi = hex_digit(piece[3]), lo = hex_digit(piece[4]);
    if (hi >= 0 && lo >= 0) return t->byte_pieces + 2 * (hi * 16 + lo);
  }
  return piece;
}
