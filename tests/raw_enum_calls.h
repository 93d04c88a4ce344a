/* C API calls taking an enum, made from C with any int (raw_enum_calls.c). */
#ifndef KVT_RAW_ENUM_CALLS_H
#define KVT_RAW_ENUM_CALLS_H

#include "kvcache/kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

void kvt_set_logger_raw(kvc_context *context, kvc_log_fn fn, void *user_data, int min_level);
const char *kvt_status_code_name_raw(int code);
size_t kvt_dtype_size_raw(int dtype);
const char *kvt_dtype_name_raw(int dtype);
kvc_status *kvt_report_stats_raw(kvc_cache *cache, int32_t seq_id, int32_t layer,
                                 int32_t kv_head, int kind, const float *values,
                                 int32_t n_values);

#ifdef __cplusplus
}
#endif

#endif
