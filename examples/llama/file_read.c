/* Whole files read into memory (kvl_file_read). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int kvl_file_read(const char *path, char **out, size_t *out_size, char *error, size_t error_size) {
  FILE *f = fopen(path, "rb");
  char *data = NULL;
  size_t size = 0, capacity = 0;
  if (f == NULL) return kvl_fail(error, error_size, "%s: cannot open: %s", path, strerror(errno));
  for (;;) {
    size_t got;
    if (capacity - size < 65536) {
      char *grown = (char *)realloc(data, capacity * 2 + 65536 + 1);
      if (grown == NULL) {
        free(data);
        fclose(f);
        return kvl_fail(error, error_size, "%s: out of host memory", path);
      }
      data = grown;
      capacity = capacity * 2 + 65536;
    }
    got = fread(data + size, 1, capacity - size, f);
    size += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    free(data);
    fclose(f);
    return kvl_fail(error, error_size, "%s: read error", path);
  }
  fclose(f);
  data[size] = '\0';
  *out = data;
  *out_size = size;
  return 0;
}
