//! `CacheParams`: the shape and storage of a cache, as `kvc_cache_params` holds them.
use std::mem::MaybeUninit;
use std::ptr;

use crate::error::{check, Result};
use crate::strings::{c_string, owned};
use crate::sys;

/// Storage element type of K and V (inputs and outputs of this crate are always f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    Bf16,
}

/// A storage format as the library's format table (`kvcache_format.h`) describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatInfo {
    /// The name used in YAML, such as "f16".
    pub name: String,
    /// Values sharing one scale; 1 for a format without scales.
    pub group_size: u32,
    /// Bytes of one group of values, its scale included.
    pub group_bytes: u32,
}

impl FormatInfo {
    /// Bytes of a row of `values` values (a multiple of the group size), scales included.
    pub fn row_bytes(&self, values: usize) -> usize {
        values / self.group_size as usize * self.group_bytes as usize
    }
}

impl DType {
    fn raw(self) -> sys::kvc_dtype {
        match self {
            DType::F32 => sys::KVC_DTYPE_F32,
            DType::F16 => sys::KVC_DTYPE_F16,
            DType::Bf16 => sys::KVC_DTYPE_BF16,
        }
    }

    /// This format's entry of the library's format table (`kvc_format_describe`).
    pub fn describe(self) -> Result<FormatInfo> {
        describe_raw(self.raw())
    }
}

/// The format table's entry for a raw `kvc_dtype` value; an error for one outside the table.
pub fn describe_raw(format: sys::kvc_dtype) -> Result<FormatInfo> {
    let mut info = MaybeUninit::<sys::kvc_format_info>::zeroed();
    // SAFETY: all-zero is a valid kvc_format_info (a NULL name); struct_size is set before the
    // call, and the name it returns is static.
    unsafe {
        (*info.as_mut_ptr()).struct_size = std::mem::size_of::<sys::kvc_format_info>() as u32;
        check(sys::kvc_format_describe(format, info.as_mut_ptr()))?;
        let info = info.assume_init();
        Ok(FormatInfo { name: owned(info.name), group_size: info.group_size, group_bytes: info.group_bytes })
    }
}

/// How a cache stores each (sequence, layer, KV head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Paged,
    Contiguous,
}

/// Parameters of `Context::cache`. `Default` is the library's own defaults
/// (`kvc_cache_params_init`); fields not here (policy parameters, compression triggers) are
/// set through `Context::cache_from_yaml`.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheParams {
    pub layers: i32,
    pub kv_heads: i32,
    /// A multiple of `kv_heads`; 0: as many as `kv_heads`.
    pub q_heads: i32,
    pub head_dim: i32,
    pub dtype: DType,
    pub layout: Layout,
    pub block_tokens: i32,
    pub growth_factor: f64,
    /// Bytes of K, V and per-token metadata.
    pub memory_limit: usize,
    /// Backend plugin name; None: "cpu".
    pub backend: Option<String>,
    /// Eviction policy plugin name; None: the cache never compresses.
    pub policy: Option<String>,
    /// Tokens kept per (sequence, layer, KV head) by the policy.
    pub budget: i32,
    /// First tokens always kept; None: the policy's default.
    pub sinks: Option<i32>,
    /// Newest tokens always kept; None: the policy's default.
    pub recent: Option<i32>,
}

impl Default for CacheParams {
    fn default() -> CacheParams {
        let mut raw = MaybeUninit::<sys::kvc_cache_params>::uninit();
        // SAFETY: kvc_cache_params_init writes every field.
        let raw = unsafe {
            sys::kvc_cache_params_init_sized(raw.as_mut_ptr(), std::mem::size_of::<sys::kvc_cache_params>());
            raw.assume_init()
        };
        CacheParams {
            layers: raw.layers,
            kv_heads: raw.kv_heads,
            q_heads: raw.q_heads,
            head_dim: raw.head_dim,
            dtype: match raw.dtype {
                sys::KVC_DTYPE_F32 => DType::F32,
                sys::KVC_DTYPE_BF16 => DType::Bf16,
                _ => DType::F16,
            },
            layout: match raw.layout {
                sys::KVC_LAYOUT_CONTIGUOUS => Layout::Contiguous,
                _ => Layout::Paged,
            },
            block_tokens: raw.block_tokens,
            growth_factor: raw.growth_factor,
            memory_limit: raw.memory_limit,
            backend: None,
            policy: None,
            budget: raw.budget,
            sinks: None,
            recent: None,
        }
    }
}

impl CacheParams {
    /// Calls `f` with the C struct; its strings live until `f` returns.
    pub(crate) fn with_raw<T>(&self, f: impl FnOnce(&sys::kvc_cache_params) -> Result<T>) -> Result<T> {
        let backend = self.backend.as_deref().map(|name| c_string("backend", name)).transpose()?;
        let policy = self.policy.as_deref().map(|name| c_string("policy", name)).transpose()?;
        let mut raw = MaybeUninit::<sys::kvc_cache_params>::uninit();
        // SAFETY: kvc_cache_params_init writes every field.
        let mut raw = unsafe {
            sys::kvc_cache_params_init_sized(raw.as_mut_ptr(), std::mem::size_of::<sys::kvc_cache_params>());
            raw.assume_init()
        };
        raw.layers = self.layers;
        raw.kv_heads = self.kv_heads;
        raw.q_heads = self.q_heads;
        raw.head_dim = self.head_dim;
        raw.dtype = self.dtype.raw();
        raw.layout = match self.layout {
            Layout::Paged => sys::KVC_LAYOUT_PAGED,
            Layout::Contiguous => sys::KVC_LAYOUT_CONTIGUOUS,
        };
        raw.block_tokens = self.block_tokens;
        raw.growth_factor = self.growth_factor;
        raw.memory_limit = self.memory_limit;
        raw.backend = backend.as_ref().map_or(ptr::null(), |name| name.as_ptr());
        raw.policy = policy.as_ref().map_or(ptr::null(), |name| name.as_ptr());
        raw.budget = self.budget;
        raw.sinks = self.sinks.unwrap_or(-1);
        raw.recent = self.recent.unwrap_or(-1);
        f(&raw)
    }
}
