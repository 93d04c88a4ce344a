/* The -1 + message error convention of llama.h. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

int kvl_fail(char *error, size_t error_size, const char *format, ...) {
  if (error != NULL && error_size > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(error, error_size, format, args);
    va_end(args);
  }
  return -1;
}

int kvl_fail_status(kvc_status *status, char *error, size_t error_size, const char *what) {
  int result;
  if (status == NULL) return 0;
  result = kvl_fail(error, error_size, "%s: %s: %s", what,
                    kvc_status_code_name(kvc_status_get_code(status)), kvc_status_message(status));
  kvc_status_free(status);
  return result;
}
