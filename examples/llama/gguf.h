/*
 * A reader of GGUF files (ggml's model format, versions 2 and 3): the header, the metadata
 * key/value pairs and the tensor directory, with every offset and length checked against the
 * file, so that a truncated or malformed file gives an error naming the problem.
 * Internal to kvc_llama; not installed.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count, the
 * metadata (string key, u32 type, value), the tensor infos (string name, u32 n_dims,
 * u64 dims[n_dims] with dims[0] the fastest, u32 ggml type, u64 offset), then the tensor data,
 * starting at the next multiple of `general.alignment` (default 32); offsets are relative to
 * that start. A string is a u64 byte count and the bytes (no NUL); an array is a u32 element
 * type, a u64 count and the elements.
 */
#ifndef KVC_LLAMA_GGUF_H
#define KVC_LLAMA_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types of the GGUF specification. */
enum {
  KVL_GGUF_UINT8 = 0,
  KVL_GGUF_INT8 = 1,
  KVL_GGUF_UINT16 = 2,
  KVL_GGUF_INT16 = 3,
  KVL_GGUF_UINT32 = 4,
  KVL_GGUF_INT32 = 5,
  KVL_GGUF_FLOAT32 = 6,
  KVL_GGUF_BOOL = 7,
  KVL_GGUF_STRING = 8,
  KVL_GGUF_ARRAY = 9,
  KVL_GGUF_UINT64 = 10,
  KVL_GGUF_INT64 = 11,
  KVL_GGUF_FLOAT64 = 12
};

/* The ggml tensor types this engine dequantises (ggml's numbering). */
enum {
  KVL_GGML_F32 = 0,
  KVL_GGML_F16 = 1,
  KVL_GGML_Q4_0 = 2,
  KVL_GGML_Q4_1 = 3,
  KVL_GGML_Q8_0 = 8
};

#define KVL_GGUF_MAX_DIMS 4

typedef struct kvl_gguf_string {
  const char *data; /* not NUL-terminated */
  uint64_t size;
} kvl_gguf_string;

typedef struct kvl_gguf_kv {
  kvl_gguf_string key;
  uint32_t type;
  const uint8_t *value; /* the value's bytes; for an array, its first element */
  uint32_t array_type;  /* arrays only */
  uint64_t array_size;  /* arrays only */
} kvl_gguf_kv;

typedef struct kvl_gguf_tensor {
  kvl_gguf_string name;
  uint32_t n_dims;
  uint64_t dims[KVL_GGUF_MAX_DIMS]; /* unused dims are 1 */
  uint32_t type;
  uint64_t n_elements;
  uint64_t n_bytes;
  const uint8_t *data;
} kvl_gguf_tensor;

typedef struct kvl_gguf {
  char *path;
  uint8_t *bytes; /* the whole file */
  uint64_t size;
  uint32_t version;
  uint64_t n_kv, n_tensors;
  kvl_gguf_kv *kv;
  kvl_gguf_tensor *tensors;
} kvl_gguf;

/** 1 if the file starts with the GGUF magic, 0 otherwise (also when it cannot be read). */
int kvl_gguf_is_gguf(const char *path);
/** Reads and checks a whole GGUF file. */
int kvl_gguf_open(const char *path, kvl_gguf **out, char *error, size_t error_size);
void kvl_gguf_close(kvl_gguf *gguf);

/** The pair with this key, or NULL. */
const kvl_gguf_kv *kvl_gguf_find(const kvl_gguf *gguf, const char *key);
/** The tensor with this name, or NULL. */
const kvl_gguf_tensor *kvl_gguf_find_tensor(const kvl_gguf *gguf, const char *name);

/* Typed getters: 0 and *out, or -1 with a message naming the key ("missing key ...", "key ...
 * has type ..., expected ..."). An integer of any width is accepted if it fits; a float may
 * be float32 or float64. */
int kvl_gguf_get_int(const kvl_gguf *gguf, const char *key, int64_t min, int64_t max,
                     int64_t *out, char *error, size_t error_size);
int kvl_gguf_get_float(const kvl_gguf *gguf, const char *key, double *out, char *error,
                       size_t error_size);
int kvl_gguf_get_bool(const kvl_gguf *gguf, const char *key, int *out, char *error,
                      size_t error_size);
int kvl_gguf_get_string(const kvl_gguf *gguf, const char *key, kvl_gguf_string *out, char *error,
                        size_t error_size);
/** An array of strings: its size and, in `items` (malloc'd, freed by the caller), views of
 * each element. */
int kvl_gguf_get_strings(const kvl_gguf *gguf, const char *key, kvl_gguf_string **items,
                         uint64_t *n_items, char *error, size_t error_size);
/** 1 if the string equals the NUL-terminated `text`. */
int kvl_gguf_string_is(kvl_gguf_string s, const char *text);

/** The name of a metadata type ("uint32", ...) or ggml tensor type ("Q4_1", ...). */
const char *kvl_gguf_type_name(uint32_t type);
const char *kvl_ggml_type_name(uint32_t type);

/* ------------------------------------------------------------------ dequantisation */

/** Bytes of n elements of a supported type, or 0 when the type is not supported or n is not
 * a whole number of its blocks (32 elements for the Q types). */
uint64_t kvl_ggml_bytes(uint32_t type, uint64_t n);
/** Converts n elements of `type` at src to f32; n is a whole number of blocks. */
void kvl_ggml_dequantize(uint32_t type, const uint8_t *src, float *dst, uint64_t n);
/** IEEE half to float (subnormals, infinities and NaN included). */
float kvl_half_to_float(uint16_t h);

#endif /* KVC_LLAMA_GGUF_H */
