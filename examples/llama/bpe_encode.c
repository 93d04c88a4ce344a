/*
 * Byte-level BPE encoding (see bpe.h), as Hugging Face `tokenizers` does for GPT-2-style
 * vocabularies:
 *   1. control tokens written in the text (such as "<|im_start|>") become their ids;
 *   2. the rest is split by GPT-2's pre-tokenizer pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   3. each piece is written as byte-level code points, one token per byte, and the adjacent
 *      pair whose merge has the lowest rank in tokenizer.ggml.merges is merged until none
 *      is left.
 * Letters, digits and spaces are exact for ASCII; beyond ASCII the classes are approximated
 * (Latin-1 and general punctuation, symbols and Unicode spaces are told apart; every other
 * code point counts as a letter).
 */
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "internal.h"

struct kvl_bpe_entry {
  uint64_t key;        /* a piece's hash, or (left << 32 | right) for a merge; 0: empty */
  const char *piece;   /* piece entries */
  int32_t id;          /* the piece's id, or the merged token */
  int32_t rank;        /* merges: the line in tokenizer.ggml.merges */
};

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i;
  for (i = 0; i < n; ++i) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h | 1; /* never 0, the empty mark */
}

static size_t capacity_for(size_t n) {
  size_t c = 16;
  while (c < 2 * n) c *= 2;
  return c;
}

static int32_t find_piece(const kvl_bpe *b, const char *s, size_t n) {
  const uint64_t h = hash_bytes(s, n);
  size_t i = (size_t)h & (b->piece_capacity - 1);
  for (;; i = (i + 1) & (b->piece_capacity - 1)) {
    const kvl_bpe_entry *e = &b->piece_table[i];
    if (e->key == 0) return -1;
    if (e->key == h && strlen(e->piece) == n && memcmp(e->piece, s, n) == 0) return e->id;
  }
}

static const kvl_bpe_entry *find_merge(const kvl_bpe *b, int32_t left, int32_t right) {
  const uint64_t key = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
  size_t i = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & (b->merge_capacity - 1);
  for (;; i = (i + 1) & (b->merge_capacity - 1)) {
    const kvl_bpe_entry *e = &b->merge_table[i];
    if (e->key == 0) return NULL;
    if (e->key == key) return e;
  }
}

static void insert_merge(kvl_bpe *b, int32_t left, int32_t right, int32_t merged, int32_t rank) {
  const uint64_t key = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
  size_t i = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & (b->merge_capacity - 1);
  for (;; i = (i + 1) & (b->merge_capacity - 1)) {
    kvl_bpe_entry *e = &b->merge_table[i];
    if (e->key == key) return; /* a repeated merge: the first (lowest) rank stays */
    if (e->key == 0) {
      e->key = key;
      e->id = merged;
      e->rank = rank;
      return;
    }
  }
}

int kvl_bpe_load_merges(kvl_bpe *b, const kvl_gguf *g, char *error, size_t error_size) {
  kvl_gguf_string *merges = NULL;
  uint64_t n_merges = 0, r;
  int32_t i;
  uint32_t byte_to_cp[256];
  char buffer[8];

  b->piece_capacity = capacity_for((size_t)b->n_tokens);
  b->piece_table = (kvl_bpe_entry *)calloc(b->piece_capacity, sizeof(kvl_bpe_entry));
  if (b->piece_table == NULL) return kvl_fail(error, error_size, "out of host memory");
  for (i = 0; i < b->n_tokens; ++i) {
    const size_t n = strlen(b->pieces[i]);
    const uint64_t h = hash_bytes(b->pieces[i], n);
    size_t at = (size_t)h & (b->piece_capacity - 1);
    if (b->is_control[i]) continue;
    while (b->piece_table[at].key != 0) at = (at + 1) & (b->piece_capacity - 1);
    b->piece_table[at].key = h;
    b->piece_table[at].piece = b->pieces[i];
    b->piece_table[at].id = i;
  }
  kvl_bpe_byte_map(byte_to_cp);
  for (i = 0; i < 256; ++i) { /* the code point as UTF-8 (all are below U+0800) */
    const uint32_t cp = byte_to_cp[i];
    size_t n;
    if (cp < 0x80) {
      buffer[0] = (char)cp;
      n = 1;
    } else {
      buffer[0] = (char)(0xC0 | cp >> 6);
      buffer[1] = (char)(0x80 | (cp & 0x3F));
      n = 2;
    }
    b->byte_token[i] = find_piece(b, buffer, n);
  }

  if (kvl_gguf_find(g, "tokenizer.ggml.merges") == NULL) return 0; /* decoding only */
  if (kvl_gguf_get_strings(g, "tokenizer.ggml.merges", &merges, &n_merges, error, error_size) !=
      0) {
    return -1;
  }
  b->merge_capacity = capacity_for((size_t)n_merges);
  b->merge_table = (kvl_bpe_entry *)calloc(b->merge_capacity, sizeof(kvl_bpe_entry));
  if (b->merge_table == NULL) {
    free(merges);
    return kvl_fail(error, error_size, "out of host memory");
  }
  for (r = 0; r < n_merges; ++r) {
    const char *s = merges[r].data, *space = memchr(s, ' ', (size_t)merges[r].size);
    int32_t left, right, merged;
    char *joined;
    size_t a, c;
    if (space == NULL) continue;
    a = (size_t)(space - s);
    c = (size_t)merges[r].size - a - 1;
    left = find_piece(b, s, a);
    right = find_piece(b, space + 1, c);
    joined = (char *)malloc(a + c + 1);
    if (joined == NULL) {
      free(merges);
      return kvl_fail(error, error_size, "out of host memory");
    }
    memcpy(joined, s, a);
    memcpy(joined + a, space + 1, c);
    merged = find_piece(b, joined, a + c);
    free(joined);
    if (left >= 0 && right >= 0 && merged >= 0) insert_merge(b, left, right, merged, (int32_t)r);
  }
  free(merges);
  return 0;
}

void kvl_bpe_free_merges(kvl_bpe *b) {
  free(b->piece_table);
  free(b->merge_table);
  b->piece_table = b->merge_table = NULL;
}

/* ------------------------------------------------------------------ pre-tokenisation */

enum { CLASS_LETTER, CLASS_NUMBER, CLASS_SPACE, CLASS_OTHER };

/* The code point at s (and its byte length in *len); malformed bytes count as one each. */
static uint32_t code_point(const unsigned char *s, size_t n, size_t *len) {
  uint32_t cp;
  size_t k, i;
  if (s[0] < 0x80) {
    *len = 1;
    return s[0];
  }
  k = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 1;
  if (k == 1 || k > n) {
    *len = 1;
    return 0xFFFD;
  }
  cp = s[0] & (0x7F >> k);
  for (i = 1; i < k; ++i) {
    if ((s[i] & 0xC0) != 0x80) {
      *len = 1;
      return 0xFFFD;
    }
    cp = cp << 6 | (s[i] & 0x3F);
  }
  *len = k;
  return cp;
}

static int classify(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CLASS_LETTER;
    if (cp >= '0' && cp <= '9') return CLASS_NUMBER;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CLASS_SPACE;
    return CLASS_OTHER;
  }
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
      cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000) {
    return CLASS_SPACE;
  }
  if (cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || (cp >= 0xBC && cp <= 0xBE)) return CLASS_NUMBER;
  if (cp == 0xAA || cp == 0xB5 || cp == 0xBA) return CLASS_LETTER;
  if (cp < 0xC0 || cp == 0xD7 || cp == 0xF7 || (cp >= 0x2000 && cp <= 0x2BFF) ||
      (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
      (cp >= 0xFF00 && cp <= 0xFF20) || cp == 0xFFFD) {
    return CLASS_OTHER;
  }
  return CLASS_LETTER;
}

static int class_at(const unsigned char *s, size_t n, size_t at, size_t *len) {
  return classify(code_point(s + at, n - at, len));
}

/* The byte length of the pre-token starting at `at` (text of n bytes, at < n). */
static size_t pre_token(const unsigned char *s, size_t n, size_t at) {
  size_t len, end, next_len;
  int c;
  if (s[at] == '\'' && at + 1 < n) {
    static const char *const suffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    size_t i;
    for (i = 0; i < sizeof suffixes / sizeof suffixes[0]; ++i) {
      const size_t k = strlen(suffixes[i]);
      if (at + 1 + k <= n && memcmp(s + at + 1, suffixes[i], k) == 0) return 1 + k;
    }
  }
  c = class_at(s, n, at, &len);
  end = at;
  if (s[at] == ' ' && at + 1 < n && class_at(s, n, at + 1, &next_len) != CLASS_SPACE) {
    end = at + 1; /* " ?X+": the space leads the run that follows */
    c = class_at(s, n, end, &len);
  }
  if (c != CLASS_SPACE) {
    while (end < n && class_at(s, n, end, &len) == c) end += len;
    return end - at;
  }
  /* Whitespace: all of it when it ends the text or precedes more whitespace only; before
   * anything else, all but its last code point (\s+(?!\S)), or the single one (\s+). */
  {
    size_t last = at;
    while (end < n && class_at(s, n, end, &len) == CLASS_SPACE) {
      last = end;
      end += len;
    }
    if (end == n || last == at) return end - at;
    return last - at;
  }
}

/* ------------------------------------------------------------------ merges */

/* Encodes one pre-token; returns the tokens written, or -1 if they do not fit. */
static int32_t encode_piece(const kvl_bpe *b, const unsigned char *s, size_t n, int32_t *out,
                            int32_t room) {
  int32_t *ids = out, count = 0, i;
  size_t k;
  if ((size_t)room < n) {
    ids = (int32_t *)malloc(n * sizeof(int32_t));
    if (ids == NULL) return -1;
  }
  for (k = 0; k < n; ++k) {
    const int32_t id = b->byte_token[s[k]];
    if (id < 0) {
      if (ids != out) free(ids);
      return -1; /* a vocabulary without this byte cannot encode it */
    }
    ids[count++] = id;
  }
  if (b->merge_table != NULL) {
    for (;;) {
      int32_t best = -1, best_rank = 0, merged = 0;
      for (i = 0; i + 1 < count; ++i) {
        const kvl_bpe_entry *e = find_merge(b, ids[i], ids[i + 1]);
        if (e != NULL && (best < 0 || e->rank < best_rank)) {
          best = i;
          best_rank = e->rank;
          merged = e->id;
        }
      }
      if (best < 0) break;
      ids[best] = merged;
      memmove(ids + best + 1, ids + best + 2, (size_t)(count - best - 2) * sizeof(int32_t));
      --count;
    }
  }
  if (count > room) {
    if (ids != out) free(ids);
    return -1;
  }
  if (ids != out) {
    memcpy(out, ids, (size_t)count * sizeof(int32_t));
    free(ids);
  }
  return count;
}

/* The control token written at s (of n bytes), and its length in *len; -1 if none. */
static int32_t control_at(const kvl_bpe *b, const char *s, size_t n, size_t *len) {
  int32_t i;
  if (s[0] != '<') return -1;
  for (i = 0; i < b->n_tokens; ++i) {
    size_t k;
    if (!b->is_control[i]) continue;
    k = strlen(b->text[i]);
    if (k > 0 && k <= n && memcmp(s, b->text[i], k) == 0) {
      *len = k;
      return i;
    }
  }
  return -1;
}

int32_t kvl_bpe_encode(const kvl_bpe *b, const char *text, int32_t *tokens, int32_t max_tokens) {
  const unsigned char *s = (const unsigned char *)text;
  const size_t n = strlen(text);
  size_t at = 0;
  int32_t count = 0;
  while (at < n) {
    size_t len, end = at;
    int32_t id = control_at(b, text + at, n - at, &len);
    if (id >= 0) {
      if (count == max_tokens) return -1;
      tokens[count++] = id;
      at += len;
      continue;
    }
    /* Pre-tokens up to the next control token. */
    while (end < n && !(s[end] == '<' && control_at(b, text + end, n - end, &len) >= 0)) ++end;
    while (at < end) {
      const size_t k = pre_token(s, end, at);
      const int32_t got = encode_piece(b, s + at, k, tokens + count, max_tokens - count);
      if (got < 0) return -1;
      count += got;
      at += k;
    }
  }
  return count;
}
