/* GGUF files: parsing and checking the header, metadata and tensor directory (see gguf.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "internal.h"

/* Sanity bounds: far above any real model, low enough that counts cannot overflow sizes. */
#define GGUF_MAX_COUNT ((uint64_t)1 << 32)
#define GGUF_MAX_DEPTH 4

typedef struct cursor {
  const kvl_gguf *g;
  uint64_t at;
  char *error;
  size_t error_size;
} cursor;

static int truncated(cursor *c, const char *what) {
  return kvl_fail(c->error, c->error_size,
                  "%s: truncated GGUF file: it ends (at byte %llu) inside %s", c->g->path,
                  (unsigned long long)c->g->size, what);
}

static int take(cursor *c, uint64_t n, const uint8_t **out, const char *what) {
  if (n > c->g->size - c->at) return truncated(c, what);
  *out = c->g->bytes + c->at;
  c->at += n;
  return 0;
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static int read_u32(cursor *c, uint32_t *out, const char *what) {
  const uint8_t *p = NULL;
  if (take(c, 4, &p, what) != 0) return -1;
  *out = le32(p);
  return 0;
}

static int read_u64(cursor *c, uint64_t *out, const char *what) {
  const uint8_t *p = NULL;
  if (take(c, 8, &p, what) != 0) return -1;
  *out = le64(p);
  return 0;
}

static int read_string(cursor *c, kvl_gguf_string *out, const char *what) {
  const uint8_t *p = NULL;
  if (read_u64(c, &out->size, what) != 0 || take(c, out->size, &p, what) != 0) return -1;
  out->data = (const char *)p;
  return 0;
}

/* Bytes of one scalar of `type`, 0 for strings and arrays, -1 for an unknown type. */
static int scalar_size(uint32_t type) {
  switch (type) {
    case KVL_GGUF_UINT8:
    case KVL_GGUF_INT8:
    case KVL_GGUF_BOOL:
      return 1;
    case KVL_GGUF_UINT16:
    case KVL_GGUF_INT16:
      return 2;
    case KVL_GGUF_UINT32:
    case KVL_GGUF_INT32:
    case KVL_GGUF_FLOAT32:
      return 4;
    case KVL_GGUF_UINT64:
    case KVL_GGUF_INT64:
    case KVL_GGUF_FLOAT64:
      return 8;
    case KVL_GGUF_STRING:
    case KVL_GGUF_ARRAY:
      return 0;
    default:
      return -1;
  }
}

/* Steps over one value of `type`. */
static int skip_value(cursor *c, uint32_t type, int depth, const char *key) {
  const int size = scalar_size(type);
  const uint8_t *p = NULL;
  if (size < 0) {
    return kvl_fail(c->error, c->error_size, "%s: bad GGUF file: key '%s' has unknown type %u",
                    c->g->path, key, (unsigned)type);
  }
  if (size > 0) return take(c, (uint64_t)size, &p, key);
  if (type == KVL_GGUF_STRING) {
    kvl_gguf_string s;
    return read_string(c, &s, key);
  }
  {
    uint32_t element;
    uint64_t n, i;
    int element_size;
    if (depth >= GGUF_MAX_DEPTH) {
      return kvl_fail(c->error, c->error_size,
                      "%s: bad GGUF file: key '%s' nests arrays more than %d deep", c->g->path,
                      key, GGUF_MAX_DEPTH);
    }
    if (read_u32(c, &element, key) != 0 || read_u64(c, &n, key) != 0) return -1;
    element_size = scalar_size(element);
    if (element_size > 0) {
      if (n > (c->g->size - c->at) / (uint64_t)element_size) return truncated(c, key);
      c->at += n * (uint64_t)element_size;
      return 0;
    }
    for (i = 0; i < n; ++i) {
      if (skip_value(c, element, depth + 1, key) != 0) return -1;
    }
    return 0;
  }
}

static int read_file(const char *path, kvl_gguf *g, char *error, size_t error_size) {
  FILE *f = fopen(path, "rb");
  long size;
  if (f == NULL) return kvl_fail(error, error_size, "%s: cannot open: %s", path, strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return kvl_fail(error, error_size, "%s: cannot determine the file size", path);
  }
  g->size = (uint64_t)size;
  g->bytes = (uint8_t *)malloc(size > 0 ? (size_t)size : 1);
  if (g->bytes == NULL) {
    fclose(f);
    return kvl_fail(error, error_size, "%s: out of host memory reading %ld bytes", path, size);
  }
  if (size > 0 && fread(g->bytes, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    return kvl_fail(error, error_size, "%s: read error", path);
  }
  fclose(f);
  return 0;
}

static int read_tensor_info(cursor *c, kvl_gguf_tensor *t, uint64_t index, uint64_t *offset) {
  char what[64];
  uint32_t d;
  snprintf(what, sizeof what, "tensor info %llu", (unsigned long long)index);
  if (read_string(c, &t->name, what) != 0 || read_u32(c, &t->n_dims, what) != 0) return -1;
  if (t->n_dims < 1 || t->n_dims > KVL_GGUF_MAX_DIMS) {
    return kvl_fail(c->error, c->error_size,
                    "%s: bad GGUF file: tensor '%.*s' has %u dimensions (1..%d supported)",
                    c->g->path, (int)t->name.size, t->name.data, (unsigned)t->n_dims,
                    KVL_GGUF_MAX_DIMS);
  }
  t->n_elements = 1;
  for (d = 0; d < KVL_GGUF_MAX_DIMS; ++d) {
    t->dims[d] = 1;
    if (d < t->n_dims && read_u64(c, &t->dims[d], what) != 0) return -1;
    if (t->dims[d] == 0 || t->dims[d] > GGUF_MAX_COUNT ||
        t->n_elements > GGUF_MAX_COUNT * 64 / t->dims[d]) {
      return kvl_fail(c->error, c->error_size,
                      "%s: bad GGUF file: tensor '%.*s' has a bad dimension %llu", c->g->path,
                      (int)t->name.size, t->name.data, (unsigned long long)t->dims[d]);
    }
    t->n_elements *= t->dims[d];
  }
  if (read_u32(c, &t->type, what) != 0 || read_u64(c, offset, what) != 0) return -1;
  return 0;
}

int kvl_gguf_is_gguf(const char *path) {
  unsigned char magic[4];
  FILE *f = path != NULL ? fopen(path, "rb") : NULL;
  int is = 0;
  if (f == NULL) return 0;
  if (fread(magic, 1, 4, f) == 4) is = memcmp(magic, "GGUF", 4) == 0;
  fclose(f);
  return is;
}

int kvl_gguf_open(const char *path, kvl_gguf **out, char *error, size_t error_size) {
  kvl_gguf *g;
  cursor c;
  uint64_t i, alignment = 32, data_start, *offsets = NULL;
  uint32_t magic;
  const kvl_gguf_kv *align_kv;

  if (path == NULL || out == NULL) {
    return kvl_fail(error, error_size, "kvl_gguf_open: path and out must not be NULL");
  }
  g = (kvl_gguf *)calloc(1, sizeof *g);
  if (g == NULL) return kvl_fail(error, error_size, "out of host memory");
  g->path = (char *)malloc(strlen(path) + 1);
  if (g->path == NULL) {
    free(g);
    return kvl_fail(error, error_size, "out of host memory");
  }
  strcpy(g->path, path);
  if (read_file(path, g, error, error_size) != 0) goto fail;
  c.g = g;
  c.at = 0;
  c.error = error;
  c.error_size = error_size;

  if (g->size < 4 || memcmp(g->bytes, "GGUF", 4) != 0) {
    kvl_fail(error, error_size, "%s: not a GGUF file (wrong magic: expected 'GGUF')", path);
    goto fail;
  }
  if (read_u32(&c, &magic, "the header") != 0 || read_u32(&c, &g->version, "the header") != 0) {
    goto fail;
  }
  if (g->version != 2 && g->version != 3) {
    kvl_fail(error, error_size, "%s: unsupported GGUF version %u (2 and 3 are supported)", path,
             (unsigned)g->version);
    goto fail;
  }
  if (read_u64(&c, &g->n_tensors, "the header") != 0 ||
      read_u64(&c, &g->n_kv, "the header") != 0) {
    goto fail;
  }
  /* Every pair and tensor info takes at least 12 bytes: counts beyond that are corrupt. */
  if (g->n_kv > g->size / 12 || g->n_tensors > g->size / 12) {
    kvl_fail(error, error_size,
             "%s: truncated GGUF file (or a corrupt header): %llu metadata pairs and %llu "
             "tensors cannot fit in %llu bytes",
             path, (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors,
             (unsigned long long)g->size);
    goto fail;
  }
  g->kv = (kvl_gguf_kv *)calloc(g->n_kv > 0 ? (size_t)g->n_kv : 1, sizeof *g->kv);
  g->tensors = (kvl_gguf_tensor *)calloc(g->n_tensors > 0 ? (size_t)g->n_tensors : 1,
                                         sizeof *g->tensors);
  offsets = (uint64_t *)calloc(g->n_tensors > 0 ? (size_t)g->n_tensors : 1, sizeof *offsets);
  if (g->kv == NULL || g->tensors == NULL || offsets == NULL) {
    kvl_fail(error, error_size, "out of host memory");
    goto fail;
  }

  for (i = 0; i < g->n_kv; ++i) {
    kvl_gguf_kv *kv = &g->kv[i];
    char key[128];
    snprintf(key, sizeof key, "metadata pair %llu", (unsigned long long)i);
    if (read_string(&c, &kv->key, key) != 0 || read_u32(&c, &kv->type, key) != 0) goto fail;
    snprintf(key, sizeof key, "%.*s", (int)(kv->key.size < 100 ? kv->key.size : 100),
             kv->key.data);
    if (kv->type == KVL_GGUF_ARRAY) {
      const uint64_t start = c.at;
      if (read_u32(&c, &kv->array_type, key) != 0 || read_u64(&c, &kv->array_size, key) != 0) {
        goto fail;
      }
      kv->value = g->bytes + c.at;
      c.at = start;
    } else {
      kv->value = g->bytes + c.at;
    }
    if (skip_value(&c, kv->type, 0, key) != 0) goto fail;
  }
  for (i = 0; i < g->n_tensors; ++i) {
    if (read_tensor_info(&c, &g->tensors[i], i, &offsets[i]) != 0) goto fail;
  }

  align_kv = kvl_gguf_find(g, "general.alignment");
  if (align_kv != NULL) {
    int64_t a;
    if (kvl_gguf_get_int(g, "general.alignment", 1, 1 << 20, &a, error, error_size) != 0) {
      goto fail;
    }
    alignment = (uint64_t)a;
  }
  data_start = (c.at + alignment - 1) / alignment * alignment;
  for (i = 0; i < g->n_tensors; ++i) {
    kvl_gguf_tensor *t = &g->tensors[i];
    t->n_bytes = kvl_ggml_bytes(t->type, t->n_elements);
    if (t->n_bytes == 0) continue; /* unsupported type: an error only if the model needs it */
    if (offsets[i] % alignment != 0 || offsets[i] > g->size || data_start > g->size - offsets[i] ||
        t->n_bytes > g->size - data_start - offsets[i]) {
      kvl_fail(error, error_size,
               "%s: truncated GGUF file: tensor '%.*s' (%llu bytes at offset %llu of the data "
               "section) does not lie inside the file's %llu bytes",
               path, (int)t->name.size, t->name.data, (unsigned long long)t->n_bytes,
               (unsigned long long)offsets[i], (unsigned long long)g->size);
      goto fail;
    }
    t->data = g->bytes + data_start + offsets[i];
  }
  free(offsets);
  *out = g;
  return 0;

fail:
  free(offsets);
  kvl_gguf_close(g);
  return -1;
}

void kvl_gguf_close(kvl_gguf *g) {
  if (g == NULL) return;
  free(g->tensors);
  free(g->kv);
  free(g->bytes);
  free(g->path);
  free(g);
}

int kvl_gguf_string_is(kvl_gguf_string s, const char *text) {
  return strlen(text) == s.size && memcmp(s.data, text, s.size) == 0;
}

const kvl_gguf_kv *kvl_gguf_find(const kvl_gguf *g, const char *key) {
  uint64_t i;
  for (i = 0; i < g->n_kv; ++i) {
    if (kvl_gguf_string_is(g->kv[i].key, key)) return &g->kv[i];
  }
  return NULL;
}

const kvl_gguf_tensor *kvl_gguf_find_tensor(const kvl_gguf *g, const char *name) {
  uint64_t i;
  for (i = 0; i < g->n_tensors; ++i) {
    if (kvl_gguf_string_is(g->tensors[i].name, name)) return &g->tensors[i];
  }
  return NULL;
}

const char *kvl_gguf_type_name(uint32_t type) {
  static const char *const names[] = {"uint8",  "int8",   "uint16", "int16", "uint32",
                                      "int32",  "float32", "bool",  "string", "array",
                                      "uint64", "int64",  "float64"};
  return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

static const kvl_gguf_kv *find_typed(const kvl_gguf *g, const char *key, char *error,
                                     size_t error_size) {
  const kvl_gguf_kv *kv = kvl_gguf_find(g, key);
  if (kv == NULL) kvl_fail(error, error_size, "%s: missing GGUF key '%s'", g->path, key);
  return kv;
}

static int wrong_type(const kvl_gguf *g, const kvl_gguf_kv *kv, const char *key,
                      const char *expected, char *error, size_t error_size) {
  return kvl_fail(error, error_size, "%s: GGUF key '%s' has type %s, expected %s", g->path, key,
                  kvl_gguf_type_name(kv->type), expected);
}

int kvl_gguf_get_int(const kvl_gguf *g, const char *key, int64_t min, int64_t max, int64_t *out,
                     char *error, size_t error_size) {
  const kvl_gguf_kv *kv = find_typed(g, key, error, error_size);
  const uint8_t *p = NULL;
  int64_t v;
  if (kv == NULL) return -1;
  p = kv->value;
  switch (kv->type) {
    case KVL_GGUF_UINT8: v = p[0]; break;
    case KVL_GGUF_INT8: v = (int8_t)p[0]; break;
    case KVL_GGUF_UINT16: v = (int64_t)(p[0] | p[1] << 8); break;
    case KVL_GGUF_INT16: v = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case KVL_GGUF_UINT32: v = (int64_t)le32(p); break;
    case KVL_GGUF_INT32: v = (int32_t)le32(p); break;
    case KVL_GGUF_UINT64:
      if (le64(p) > (uint64_t)INT64_MAX) {
        return kvl_fail(error, error_size, "%s: GGUF key '%s' = %llu is out of range", g->path,
                        key, (unsigned long long)le64(p));
      }
      v = (int64_t)le64(p);
      break;
    case KVL_GGUF_INT64: v = (int64_t)le64(p); break;
    default: return wrong_type(g, kv, key, "an integer", error, error_size);
  }
  if (v < min || v > max) {
    return kvl_fail(error, error_size, "%s: GGUF key '%s' = %lld is outside %lld..%lld", g->path,
                    key, (long long)v, (long long)min, (long long)max);
  }
  *out = v;
  return 0;
}

int kvl_gguf_get_float(const kvl_gguf *g, const char *key, double *out, char *error,
                       size_t error_size) {
  const kvl_gguf_kv *kv = find_typed(g, key, error, error_size);
  if (kv == NULL) return -1;
  if (kv->type == KVL_GGUF_FLOAT32) {
    uint32_t bits = le32(kv->value);
    float f;
    memcpy(&f, &bits, sizeof f);
    *out = f;
    return 0;
  }
  if (kv->type == KVL_GGUF_FLOAT64) {
    uint64_t bits = le64(kv->value);
    double d;
    memcpy(&d, &bits, sizeof d);
    *out = d;
    return 0;
  }
  return wrong_type(g, kv, key, "float32 or float64", error, error_size);
}

int kvl_gguf_get_bool(const kvl_gguf *g, const char *key, int *out, char *error,
                      size_t error_size) {
  const kvl_gguf_kv *kv = find_typed(g, key, error, error_size);
  if (kv == NULL) return -1;
  if (kv->type != KVL_GGUF_BOOL) return wrong_type(g, kv, key, "bool", error, error_size);
  *out = kv->value[0] != 0;
  return 0;
}

int kvl_gguf_get_string(const kvl_gguf *g, const char *key, kvl_gguf_string *out, char *error,
                        size_t error_size) {
  const kvl_gguf_kv *kv = find_typed(g, key, error, error_size);
  if (kv == NULL) return -1;
  if (kv->type != KVL_GGUF_STRING) return wrong_type(g, kv, key, "string", error, error_size);
  out->size = le64(kv->value);
  out->data = (const char *)kv->value + 8;
  return 0;
}

int kvl_gguf_get_strings(const kvl_gguf *g, const char *key, kvl_gguf_string **items,
                         uint64_t *n_items, char *error, size_t error_size) {
  const kvl_gguf_kv *kv = find_typed(g, key, error, error_size);
  const uint8_t *p = NULL;
  uint64_t i;
  if (kv == NULL) return -1;
  if (kv->type != KVL_GGUF_ARRAY || kv->array_type != KVL_GGUF_STRING) {
    return kvl_fail(error, error_size, "%s: GGUF key '%s' has type %s%s%s, expected an array of "
                    "strings", g->path, key, kvl_gguf_type_name(kv->type),
                    kv->type == KVL_GGUF_ARRAY ? " of " : "",
                    kv->type == KVL_GGUF_ARRAY ? kvl_gguf_type_name(kv->array_type) : "");
  }
  *items = (kvl_gguf_string *)malloc(kv->array_size > 0 ? (size_t)kv->array_size * sizeof **items
                                                        : 1);
  if (*items == NULL) return kvl_fail(error, error_size, "out of host memory");
  p = kv->value; /* checked by the parser: every element lies inside the file */
  for (i = 0; i < kv->array_size; ++i) {
    (*items)[i].size = le64(p);
    (*items)[i].data = (const char *)p + 8;
    p += 8 + (*items)[i].size;
  }
  *n_items = kv->array_size;
  return 0;
}
