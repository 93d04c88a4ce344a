/* Calls of the C API with an int no enumerator has where it takes an enum, as a C or FFI
 * caller may make them: legal in C, while converting such an int to the enum in C++ is
 * undefined, so the C++ suites make these calls through here. */
#include "raw_enum_calls.h"

void kvt_set_logger_raw(kvc_context *context, kvc_log_fn fn, void *user_data, int min_level) {
  kvc_context_set_logger(context, fn, user_data, (kvc_log_level)min_level);
}

const char *kvt_status_code_name_raw(int code) {
  return kvc_status_code_name((kvc_status_code)code);
}

size_t kvt_dtype_size_raw(int dtype) { return kvc_dtype_size((kvc_dtype)dtype); }

const char *kvt_dtype_name_raw(int dtype) { return kvc_dtype_name((kvc_dtype)dtype); }

kvc_status *kvt_report_stats_raw(kvc_cache *cache, int32_t seq_id, int32_t layer,
                                 int32_t kv_head, int kind, const float *values,
                                 int32_t n_values) {
  return kvc_report_stats(cache, seq_id, layer, kv_head, (kvc_stat_kind)kind, values, n_values);
}
