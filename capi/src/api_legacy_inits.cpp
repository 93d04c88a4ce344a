// The exported kvc_X_init symbols of binaries built against headers older than the _sized
// functions: each writes its struct's oldest layout (versioned_init.hpp), never more, since the
// caller's size is unknown. kvcache.h defines kvc_X_init as macros over the _sized functions.
#include "versioned_init.hpp"

#undef kvc_cache_params_init
#undef kvc_cache_stats_init
#undef kvc_batch_init
#undef kvc_attention_params_init
#undef kvc_policy_info_init
#undef kvc_estimate_request_init
#undef kvc_prefix_init

extern "C" {

void kvc_cache_params_init(kvc_cache_params* params) {
  kvc_cache_params_init_sized(params, kvc::oldest_layout<kvc_cache_params>);
}

void kvc_cache_stats_init(kvc_cache_stats* stats) {
  kvc_cache_stats_init_sized(stats, kvc::oldest_layout<kvc_cache_stats>);
}

void kvc_batch_init(kvc_batch* batch, int32_t n_seqs, const int32_t* seq_ids,
                    const int32_t* n_tokens, const int32_t* positions) {
  kvc_batch_init_sized(batch, kvc::oldest_layout<kvc_batch>, n_seqs, seq_ids, n_tokens,
                       positions);
}

void kvc_attention_params_init(kvc_attention_params* params) {
  kvc_attention_params_init_sized(params, kvc::oldest_layout<kvc_attention_params>);
}

void kvc_policy_info_init(kvc_policy_info* info) {
  kvc_policy_info_init_sized(info, kvc::oldest_layout<kvc_policy_info>);
}

void kvc_estimate_request_init(kvc_estimate_request* request, int32_t prompt_tokens,
                               int32_t chunk_tokens, int32_t new_tokens) {
  kvc_estimate_request_init_sized(request, kvc::oldest_layout<kvc_estimate_request>,
                                  prompt_tokens, chunk_tokens, new_tokens);
}

void kvc_prefix_init(kvc_prefix* prefix, const char* model, const int32_t* token_ids,
                     int32_t n_tokens) {
  kvc_prefix_init_sized(prefix, kvc::oldest_layout<kvc_prefix>, model, token_ids, n_tokens);
}

}  // extern "C"
