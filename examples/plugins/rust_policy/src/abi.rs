//! The policy half of `kvcache/kvcache_plugin.h` (ABI 1.1), declared by hand: what a policy
//! plugin exports and what the host hands it. Backend structs are left out.
//!
//! Every struct starts with `struct_size`, the size its writer was built with. Structs the
//! host writes (score jobs, needs, the host API) may be smaller or larger than ours: read only
//! fields inside their `struct_size` (`has_field!`), and step through arrays of jobs by the
//! first job's `struct_size` (`job_at`), never by `size_of`.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

pub const KVC_PLUGIN_ABI_MAJOR: u32 = 1;
pub const KVC_PLUGIN_ABI_MINOR: u32 = 1;
pub const KVC_PLUGIN_ABI_VERSION: u32 = (KVC_PLUGIN_ABI_MAJOR << 16) | KVC_PLUGIN_ABI_MINOR;

/// `kvc_status_code` values a policy returns.
pub const KVC_OK: i32 = 0;
pub const KVC_ERR_CONFIG: i32 = 5;
pub const KVC_ERR_PLUGIN: i32 = 6;

/// `kvc_plugin_kind`.
pub type kvc_plugin_kind = c_int;
pub const KVC_PLUGIN_POLICY: kvc_plugin_kind = 1;

pub type kvc_log_level = c_int;

#[repr(C)]
pub struct kvc_plugin_error {
    pub message: [c_char; 512],
}

pub type kvc_range_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, begin: usize, end: usize)>;

#[repr(C)]
pub struct kvc_host_api {
    pub struct_size: u32,
    pub abi_version: u32,
    pub host: *mut c_void,
    pub log: Option<unsafe extern "C" fn(host: *mut c_void, level: kvc_log_level, message: *const c_char)>,
    pub parallel_for: Option<
        unsafe extern "C" fn(
            host: *mut c_void,
            n: usize,
            grain: usize,
            body: kvc_range_fn,
            user_data: *mut c_void,
        ),
    >,
    pub alloc: Option<unsafe extern "C" fn(host: *mut c_void, bytes: usize, alignment: usize) -> *mut c_void>,
    pub free: Option<unsafe extern "C" fn(host: *mut c_void, ptr: *mut c_void)>,
}

#[repr(C)]
pub struct kvc_plugin_descriptor {
    pub struct_size: u32,
    pub abi_version: u32,
    pub kind: kvc_plugin_kind,
    pub name: *const c_char,
    pub version: u32,
    pub vtable: *const c_void,
}

/// The type of the exported `kvc_plugin_entry`.
pub type kvc_plugin_entry_fn = unsafe extern "C" fn(
    host: *const kvc_host_api,
    out_descriptors: *mut *const kvc_plugin_descriptor,
    out_count: *mut usize,
    error: *mut kvc_plugin_error,
) -> i32;

/// `kvc_policy_param` (`kvc_key_value` of kvcache.h).
#[repr(C)]
pub struct kvc_policy_param {
    pub key: *const c_char,
    pub value: *const c_char,
}

#[repr(C)]
pub struct kvc_policy_needs {
    pub struct_size: u32,
    pub stats: u32,
    pub observation_window: i32,
    pub scorer: *const c_char,
    pub default_sinks: i32,
    pub default_recent: i32,
    pub scorer_params: *const kvc_policy_param,
    pub n_scorer_params: usize,
}

#[repr(C)]
pub struct kvc_score_job {
    pub struct_size: u32,
    pub seq_id: i32,
    pub layer: i32,
    pub kv_head: i32,
    pub n_tokens: i32,
    pub pos: *const i32,
    pub attn_sum: *const f32,
    pub attn_last: *const f32,
    pub attn_window: *const f32,
    pub keys: *const f32,
    pub head_dim: i32,
    pub budget: i32,
    pub sinks: i32,
    pub recent: i32,
    pub scores: *mut f32,
    /// (1.1)
    pub sink_end: i32,
    /// (1.1)
    pub recent_begin: i32,
}

#[repr(C)]
pub struct kvc_budget_request {
    pub struct_size: u32,
    pub layer: i32,
    pub n_layers: i32,
    pub n_heads: i32,
    pub configured: *const i32,
    pub jobs: *const kvc_score_job,
}

#[repr(C)]
pub struct kvc_policy_vtable {
    pub struct_size: u32,
    pub create: Option<
        unsafe extern "C" fn(
            host: *const kvc_host_api,
            params: *const kvc_policy_param,
            n_params: usize,
            out_instance: *mut *mut c_void,
            error: *mut kvc_plugin_error,
        ) -> i32,
    >,
    pub destroy: Option<unsafe extern "C" fn(instance: *mut c_void)>,
    pub needs: Option<unsafe extern "C" fn(instance: *mut c_void, out_needs: *mut kvc_policy_needs)>,
    pub score: Option<
        unsafe extern "C" fn(
            instance: *mut c_void,
            jobs: *const kvc_score_job,
            n_jobs: usize,
            error: *mut kvc_plugin_error,
        ) -> i32,
    >,
    pub budgets: Option<
        unsafe extern "C" fn(
            instance: *mut c_void,
            request: *const kvc_budget_request,
            budgets: *mut i32,
            error: *mut kvc_plugin_error,
        ) -> i32,
    >,
}

/// `KVC_PLUGIN_HAS_FIELD`: whether `field` of the `$ty` at raw pointer `$ptr` lies inside its
/// `struct_size`. Must be used inside `unsafe` (it reads `struct_size`).
#[macro_export]
macro_rules! has_field {
    ($ptr:expr, $ty:ty, $field:ident) => {
        (*$ptr).struct_size as usize
            >= ::std::mem::offset_of!($ty, $field)
                + $crate::abi::field_size(|s: *const $ty| ::std::ptr::addr_of!((*s).$field))
    };
}

/// The size of the field a projection points at (never calls it: it only names the type).
pub fn field_size<S, F>(_project: impl Fn(*const S) -> *const F) -> usize {
    std::mem::size_of::<F>()
}

/// `KVC_PLUGIN_AT`: job `index` of an array strided by its first element's `struct_size`.
///
/// # Safety
/// `jobs` points at an array of at least `index + 1` jobs written by the host.
pub unsafe fn job_at(jobs: *const kvc_score_job, index: usize) -> *const kvc_score_job {
    jobs.cast::<u8>().add(index * (*jobs).struct_size as usize).cast()
}

/// Writes `message` into a plugin error (truncated, NUL-terminated) and returns `code`.
///
/// # Safety
/// `error` is the host's `kvc_plugin_error`.
pub unsafe fn fail(error: *mut kvc_plugin_error, code: i32, message: &str) -> i32 {
    let room = (*error).message.len() - 1;
    let bytes = &message.as_bytes()[..message.len().min(room)];
    for (dst, &src) in (*error).message.iter_mut().zip(bytes) {
        *dst = src as c_char;
    }
    (*error).message[bytes.len()] = 0;
    code
}
