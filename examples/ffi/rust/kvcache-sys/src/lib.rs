//! The C API of `kvcache/kvcache.h`, declared by hand, one item per C declaration, and the
//! linking of libkvcache (build.rs: `KVCACHE_LIB_DIR`, else pkg-config). The safe API is the
//! `kvcache` crate.
//!
//! C enums are passed as `c_int` with their values as constants: a Rust `enum` would be
//! undefined behaviour for a value a newer library adds. Opaque handles follow the
//! Rustonomicon's pattern (zero-sized, `!Send`, `!Sync`, `!Unpin`).
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::marker::{PhantomData, PhantomPinned};

macro_rules! opaque {
    ($name:ident) => {
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    };
}
opaque!(kvc_status);
opaque!(kvc_context);
opaque!(kvc_cache);

pub type kvc_status_code = c_int;
pub const KVC_OK: kvc_status_code = 0;
pub const KVC_ERR_INVALID_ARGUMENT: kvc_status_code = 1;
pub const KVC_ERR_OUT_OF_MEMORY: kvc_status_code = 2;
pub const KVC_ERR_NOT_FOUND: kvc_status_code = 3;
pub const KVC_ERR_ALREADY_EXISTS: kvc_status_code = 4;
pub const KVC_ERR_CONFIG: kvc_status_code = 5;
pub const KVC_ERR_PLUGIN: kvc_status_code = 6;
pub const KVC_ERR_UNSUPPORTED: kvc_status_code = 7;
pub const KVC_ERR_NO_DEVICE: kvc_status_code = 8;
pub const KVC_ERR_INTERNAL: kvc_status_code = 9;
pub const KVC_ERR_IO: kvc_status_code = 10;

pub type kvc_log_level = c_int;
pub const KVC_LOG_DEBUG: kvc_log_level = 0;
pub const KVC_LOG_INFO: kvc_log_level = 1;
pub const KVC_LOG_WARN: kvc_log_level = 2;
pub const KVC_LOG_ERROR: kvc_log_level = 3;
pub const KVC_LOG_OFF: kvc_log_level = 4;

pub type kvc_log_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, level: kvc_log_level, message: *const c_char)>;

pub type kvc_plugin_kind = c_int;
pub const KVC_PLUGIN_POLICY: kvc_plugin_kind = 1;
pub const KVC_PLUGIN_BACKEND: kvc_plugin_kind = 2;
pub const KVC_PLUGIN_STORE: kvc_plugin_kind = 3;

#[repr(C)]
pub struct kvc_plugin_info {
    pub struct_size: u32,
    pub kind: kvc_plugin_kind,
    pub name: *const c_char,
    pub version: u32,
    pub path: *const c_char,
}

#[repr(C)]
pub struct kvc_format_info {
    pub struct_size: u32,
    pub format: kvc_dtype,
    pub name: *const c_char,
    pub group_size: u32,
    pub group_bytes: u32,
}

pub type kvc_dtype = c_int;
pub const KVC_DTYPE_F32: kvc_dtype = 0;
pub const KVC_DTYPE_F16: kvc_dtype = 1;
pub const KVC_DTYPE_BF16: kvc_dtype = 2;
pub const KVC_DTYPE_Q8_0: kvc_dtype = 3;
pub const KVC_DTYPE_Q4_0: kvc_dtype = 4;

pub type kvc_layout = c_int;
pub const KVC_LAYOUT_PAGED: kvc_layout = 0;
pub const KVC_LAYOUT_CONTIGUOUS: kvc_layout = 1;

pub type kvc_rotation = c_int;
pub const KVC_ROTATION_NONE: kvc_rotation = 0;
pub const KVC_ROTATION_HADAMARD: kvc_rotation = 1;

#[repr(C)]
pub struct kvc_key_value {
    pub key: *const c_char,
    pub value: *const c_char,
}

pub type kvc_prefill_compression = c_int;
pub const KVC_PREFILL_NONE: kvc_prefill_compression = 0;
pub const KVC_PREFILL_PER_CHUNK: kvc_prefill_compression = 1;
pub const KVC_PREFILL_ONCE: kvc_prefill_compression = 2;

#[repr(C)]
pub struct kvc_cache_params {
    pub struct_size: u32,
    pub layers: i32,
    pub kv_heads: i32,
    pub q_heads: i32,
    pub head_dim: i32,
    pub dtype: kvc_dtype,
    pub layout: kvc_layout,
    pub block_tokens: i32,
    pub growth_factor: f64,
    pub memory_limit: usize,
    pub backend: *const c_char,
    pub policy: *const c_char,
    pub budget: i32,
    pub budget_ratio: f64,
    pub sinks: i32,
    pub recent: i32,
    pub policy_params: *const kvc_key_value,
    pub n_policy_params: usize,
    pub prefill: kvc_prefill_compression,
    pub decode_every: i32,
    pub decode_slack: i32,
    pub k_dtype: i32,
    pub v_dtype: i32,
    pub k_rotation: i32,
    pub prefix_cache: i32,
    pub prefix_store: *const c_char,
    pub prefix_write_through: i32,
    pub demote_keep: f64,
    pub demote_k_dtype: i32,
    pub demote_v_dtype: i32,
}

#[repr(C)]
pub struct kvc_cache_stats {
    pub struct_size: u32,
    pub bytes_used: usize,
    pub bytes_peak: usize,
    pub bytes_limit: usize,
    pub bytes_reserved: usize,
    pub tokens_stored: u64,
    pub tokens_evicted: u64,
    pub bytes_copied: u64,
    pub blocks_used: usize,
    pub blocks_free: usize,
    pub sequences: i32,
    pub bytes_shared: usize,
    pub bytes_cached: usize,
    pub bytes_reclaimed: u64,
    pub prefix_hits: u64,
    pub prefix_tokens_reused: u64,
    pub tokens_demoted: u64,
}

#[repr(C)]
pub struct kvc_segment_view {
    pub k: *const c_void,
    pub v: *const c_void,
    pub pos: *const i32,
    pub count: i32,
}

pub type kvc_device = c_int;
pub const KVC_DEVICE_HOST: kvc_device = 0;
pub const KVC_DEVICE_BACKEND: kvc_device = 1;

#[repr(C)]
pub struct kvc_tensor {
    pub data: *const c_void,
    pub dtype: kvc_dtype,
    pub device: kvc_device,
    pub row_stride: usize,
}

#[repr(C)]
pub struct kvc_tensor_mut {
    pub data: *mut c_void,
    pub dtype: kvc_dtype,
    pub device: kvc_device,
    pub row_stride: usize,
}

#[repr(C)]
pub struct kvc_batch {
    pub struct_size: u32,
    pub n_seqs: i32,
    pub seq_ids: *const i32,
    pub n_tokens: *const i32,
    pub positions: *const i32,
    pub stream: *mut c_void,
    pub prompt_end: *const i32,
}

#[repr(C)]
pub struct kvc_attention_params {
    pub struct_size: u32,
    pub scale: f32,
    pub sliding_window: i32,
    pub softcap: f32,
}

#[repr(C)]
pub struct kvc_estimate_request {
    pub struct_size: u32,
    pub prompt_tokens: i32,
    pub chunk_tokens: i32,
    pub new_tokens: i32,
    pub marks_prompt_end: i32,
}

#[repr(C)]
pub struct kvc_policy_info {
    pub struct_size: u32,
    pub name: *const c_char,
    pub sinks: i32,
    pub recent: i32,
    pub budget_tokens: i32,
    pub budget_ratio: f64,
    pub stats: u32,
    pub observation_window: i32,
}

pub type kvc_stat_kind = c_int;
pub const KVC_STAT_KIND_ATTN_SUM: kvc_stat_kind = 1;
pub const KVC_STAT_KIND_ATTN_LAST: kvc_stat_kind = 2;
pub const KVC_STAT_KIND_ATTN_WINDOW: kvc_stat_kind = 4;

#[repr(C)]
pub struct kvc_prefix {
    pub struct_size: u32,
    pub model: *const c_char,
    pub token_ids: *const i32,
    pub n_tokens: i32,
    pub chunk_tokens: i32,
}

extern "C" {
    pub fn kvc_version() -> u32;
    pub fn kvc_version_string() -> *const c_char;

    pub fn kvc_status_get_code(status: *const kvc_status) -> kvc_status_code;
    pub fn kvc_status_message(status: *const kvc_status) -> *const c_char;
    pub fn kvc_status_free(status: *mut kvc_status);
    pub fn kvc_status_code_name(code: kvc_status_code) -> *const c_char;

    pub fn kvc_context_create(
        yaml_text: *const c_char,
        out_context: *mut *mut kvc_context,
    ) -> *mut kvc_status;
    pub fn kvc_context_create_from_file(
        path: *const c_char,
        out_context: *mut *mut kvc_context,
    ) -> *mut kvc_status;
    pub fn kvc_context_destroy(context: *mut kvc_context);
    pub fn kvc_context_set_logger(
        context: *mut kvc_context,
        fn_: kvc_log_fn,
        user_data: *mut c_void,
        min_level: kvc_log_level,
    );
    pub fn kvc_context_load_plugin(context: *mut kvc_context, path: *const c_char) -> *mut kvc_status;
    pub fn kvc_context_plugin_count(context: *const kvc_context) -> usize;
    pub fn kvc_context_plugin_info(
        context: *const kvc_context,
        index: usize,
        out_info: *mut kvc_plugin_info,
    ) -> *mut kvc_status;

    pub fn kvc_dtype_size(dtype: kvc_dtype) -> usize;
    pub fn kvc_dtype_name(dtype: kvc_dtype) -> *const c_char;
    pub fn kvc_format_describe(format: kvc_dtype, out_info: *mut kvc_format_info) -> *mut kvc_status;

    pub fn kvc_cache_params_init_sized(params: *mut kvc_cache_params, struct_size: usize);
    pub fn kvc_cache_create(
        context: *mut kvc_context,
        params: *const kvc_cache_params,
        out_cache: *mut *mut kvc_cache,
    ) -> *mut kvc_status;
    pub fn kvc_cache_create_from_yaml(
        context: *mut kvc_context,
        yaml_text: *const c_char,
        out_cache: *mut *mut kvc_cache,
    ) -> *mut kvc_status;
    pub fn kvc_cache_destroy(cache: *mut kvc_cache);
    pub fn kvc_cache_get_params(
        cache: *const kvc_cache,
        out_params: *mut kvc_cache_params,
    ) -> *mut kvc_status;
    pub fn kvc_cache_set_stream(cache: *mut kvc_cache, stream: *mut c_void) -> *mut kvc_status;
    pub fn kvc_cache_stats_init_sized(stats: *mut kvc_cache_stats, struct_size: usize);
    pub fn kvc_cache_get_stats(cache: *const kvc_cache, out_stats: *mut kvc_cache_stats) -> *mut kvc_status;

    pub fn kvc_seq_create(cache: *mut kvc_cache, seq_id: i32) -> *mut kvc_status;
    pub fn kvc_seq_remove(cache: *mut kvc_cache, seq_id: i32) -> *mut kvc_status;
    pub fn kvc_seq_reserve(cache: *mut kvc_cache, seq_id: i32, tokens: i32) -> *mut kvc_status;
    pub fn kvc_seq_fork(cache: *mut kvc_cache, src_seq_id: i32, dst_seq_id: i32) -> *mut kvc_status;
    pub fn kvc_seq_truncate(cache: *mut kvc_cache, seq_id: i32, position: i32) -> *mut kvc_status;
    pub fn kvc_seq_remove_range(cache: *mut kvc_cache, seq_id: i32, first: i32, end: i32) -> *mut kvc_status;
    pub fn kvc_seq_export_size(cache: *mut kvc_cache, seq_id: i32, out_size: *mut usize) -> *mut kvc_status;
    pub fn kvc_seq_export(
        cache: *mut kvc_cache,
        seq_id: i32,
        buffer: *mut c_void,
        capacity: usize,
        out_written: *mut usize,
    ) -> *mut kvc_status;
    pub fn kvc_seq_import(
        cache: *mut kvc_cache,
        seq_id: i32,
        data: *const c_void,
        size: usize,
    ) -> *mut kvc_status;
    pub fn kvc_seq_export_file(cache: *mut kvc_cache, seq_id: i32, path: *const c_char) -> *mut kvc_status;
    pub fn kvc_seq_import_file(cache: *mut kvc_cache, seq_id: i32, path: *const c_char) -> *mut kvc_status;
    pub fn kvc_seq_length(
        cache: *const kvc_cache,
        seq_id: i32,
        layer: i32,
        kv_head: i32,
        out_length: *mut i32,
    ) -> *mut kvc_status;
    pub fn kvc_seq_view(
        cache: *const kvc_cache,
        seq_id: i32,
        layer: i32,
        kv_head: i32,
        out_views: *mut kvc_segment_view,
        capacity: usize,
        out_count: *mut usize,
    ) -> *mut kvc_status;

    pub fn kvc_batch_init_sized(
        batch: *mut kvc_batch,
        struct_size: usize,
        n_seqs: i32,
        seq_ids: *const i32,
        n_tokens: *const i32,
        positions: *const i32,
    );
    pub fn kvc_attention_params_init_sized(params: *mut kvc_attention_params, struct_size: usize);
    pub fn kvc_append(
        cache: *mut kvc_cache,
        layer: i32,
        batch: *const kvc_batch,
        k: *const kvc_tensor,
        v: *const kvc_tensor,
    ) -> *mut kvc_status;
    pub fn kvc_attend(
        cache: *mut kvc_cache,
        layer: i32,
        batch: *const kvc_batch,
        q: *const kvc_tensor,
        params: *const kvc_attention_params,
        out: *mut kvc_tensor_mut,
    ) -> *mut kvc_status;
    pub fn kvc_append_attend(
        cache: *mut kvc_cache,
        layer: i32,
        batch: *const kvc_batch,
        q: *const kvc_tensor,
        k: *const kvc_tensor,
        v: *const kvc_tensor,
        params: *const kvc_attention_params,
        out: *mut kvc_tensor_mut,
    ) -> *mut kvc_status;

    pub fn kvc_compress(
        cache: *mut kvc_cache,
        layer: i32,
        n_seqs: i32,
        seq_ids: *const i32,
    ) -> *mut kvc_status;
    pub fn kvc_policy_info_init_sized(info: *mut kvc_policy_info, struct_size: usize);
    pub fn kvc_cache_policy_info(cache: *const kvc_cache, out_info: *mut kvc_policy_info) -> *mut kvc_status;
    pub fn kvc_report_stats(
        cache: *mut kvc_cache,
        seq_id: i32,
        layer: i32,
        kv_head: i32,
        kind: kvc_stat_kind,
        values: *const f32,
        n_values: i32,
    ) -> *mut kvc_status;
    pub fn kvc_cache_estimate_peak_bytes(
        cache: *const kvc_cache,
        prompt_tokens: i32,
        chunk_tokens: i32,
        new_tokens: i32,
        out_bytes: *mut usize,
    ) -> *mut kvc_status;
    pub fn kvc_estimate_request_init_sized(
        request: *mut kvc_estimate_request,
        struct_size: usize,
        prompt_tokens: i32,
        chunk_tokens: i32,
        new_tokens: i32,
    );
    pub fn kvc_cache_estimate(
        cache: *const kvc_cache,
        request: *const kvc_estimate_request,
        out_bytes: *mut usize,
    ) -> *mut kvc_status;

    pub fn kvc_seq_offload(
        cache: *mut kvc_cache,
        seq_id: i32,
        store: *const c_char,
        key: *const c_char,
    ) -> *mut kvc_status;
    pub fn kvc_seq_restore(
        cache: *mut kvc_cache,
        seq_id: i32,
        store: *const c_char,
        key: *const c_char,
    ) -> *mut kvc_status;
    pub fn kvc_store_drop(
        context: *mut kvc_context,
        store: *const c_char,
        key: *const c_char,
    ) -> *mut kvc_status;
    pub fn kvc_prefix_init_sized(
        prefix: *mut kvc_prefix,
        struct_size: usize,
        model: *const c_char,
        token_ids: *const i32,
        n_tokens: i32,
    );
    pub fn kvc_prefix_save(
        cache: *mut kvc_cache,
        seq_id: i32,
        store: *const c_char,
        prefix: *const kvc_prefix,
        out_tokens_saved: *mut i32,
    ) -> *mut kvc_status;
    pub fn kvc_prefix_load(
        cache: *mut kvc_cache,
        seq_id: i32,
        store: *const c_char,
        prefix: *const kvc_prefix,
        out_tokens_restored: *mut i32,
    ) -> *mut kvc_status;

    pub fn kvc_prefix_attach(
        cache: *mut kvc_cache,
        seq_id: i32,
        prefix: *const kvc_prefix,
        out_tokens_attached: *mut i32,
    ) -> *mut kvc_status;
    pub fn kvc_prefix_publish(
        cache: *mut kvc_cache,
        seq_id: i32,
        prefix: *const kvc_prefix,
        out_tokens_published: *mut i32,
    ) -> *mut kvc_status;
    pub fn kvc_prefix_lookup(
        cache: *mut kvc_cache,
        prefix: *const kvc_prefix,
        out_tokens: *mut i32,
    ) -> *mut kvc_status;
}
