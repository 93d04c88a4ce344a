/* A text already encoded: a file of whitespace-separated decimal token ids (kvl_token_ids_read). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int kvl_token_ids_read(const char *path, int32_t vocab_size, int32_t **out_ids,
                       int32_t *out_count, char *error, size_t error_size) {
  size_t size = 0, capacity = 0, n = 0;
  char *text = NULL, *at;
  int32_t *ids = NULL;
  if (path == NULL || out_ids == NULL || out_count == NULL) {
    return kvl_fail(error, error_size,
                    "kvl_token_ids_read: path, out_ids and out_count must not be NULL");
  }
  if (kvl_file_read(path, &text, &size, error, error_size) != 0) return -1;
  if (strlen(text) != size) {
    free(text);
    return kvl_fail(error, error_size,
                    "%s: the file contains a NUL byte; expected decimal token ids", path);
  }
  at = text;
  for (;;) {
    char *end;
    long value;
    while (isspace((unsigned char)*at)) ++at;
    if (*at == '\0') break;
    errno = 0;
    value = strtol(at, &end, 10);
    if (end == at || errno != 0 || (*end != '\0' && !isspace((unsigned char)*end))) {
      kvl_fail(error, error_size, "%s: token %zu at byte %zu is not a decimal integer", path,
               n + 1, (size_t)(at - text));
      goto fail;
    }
    if (value < 0 || value >= vocab_size) {
      kvl_fail(error, error_size, "%s: token %zu is %ld, outside the model's vocabulary 0..%d",
               path, n + 1, value, (int)vocab_size - 1);
      goto fail;
    }
    if (n == capacity) {
      int32_t *grown;
      if (capacity > (size_t)INT32_MAX / 2) {
        kvl_fail(error, error_size, "%s: too many tokens", path);
        goto fail;
      }
      grown = (int32_t *)realloc(ids, (capacity * 2 + 4096) * sizeof(int32_t));
      if (grown == NULL) {
        kvl_fail(error, error_size, "%s: out of host memory", path);
        goto fail;
      }
      ids = grown;
      capacity = capacity * 2 + 4096;
    }
    ids[n++] = (int32_t)value;
    at = end;
  }
  free(text);
  if (n == 0) {
    free(ids);
    return kvl_fail(error, error_size, "%s: no token ids", path);
  }
  *out_ids = ids;
  *out_count = (int32_t)n;
  return 0;
fail:
  free(text);
  free(ids);
  return -1;
}
