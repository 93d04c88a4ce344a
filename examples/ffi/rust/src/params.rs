//! `CacheParams`: the shape and storage of a cache, as `kvc_cache_params` holds them.
use std::mem::MaybeUninit;
use std::ptr;

use crate::error::{check, Result};
use crate::strings::{c_string, owned};
use crate::sys;

/// Storage format of K and V (inputs and outputs of this crate are always f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    Bf16,
    /// Groups of 32 int8 values with an f16 scale (`kvcache_format.h`).
    #[allow(non_camel_case_types)]
    Q8_0,
    /// Groups of 32 4-bit values with an f16 scale (`kvcache_format.h`).
    #[allow(non_camel_case_types)]
    Q4_0,
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
            DType::Q8_0 => sys::KVC_DTYPE_Q8_0,
            DType::Q4_0 => sys::KVC_DTYPE_Q4_0,
        }
    }

    /// Bytes per element of a format without scales; 0 for `Q8_0` and `Q4_0`.
    pub fn size(self) -> usize {
        // SAFETY: any value is accepted.
        unsafe { sys::kvc_dtype_size(self.raw()) }
    }

    /// The format's name, as in YAML.
    pub fn name(self) -> &'static str {
        // SAFETY: static storage, for any value.
        unsafe { std::ffi::CStr::from_ptr(sys::kvc_dtype_name(self.raw())) }.to_str().unwrap_or("")
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

/// A rotation the backend applies to K (`kvc_rotation`, `kvcache_rotation.h`): to each K row
/// before it is stored and to each query at attention, so attention is unchanged up to
/// rounding. Keys read back (views, exports, policies) are the rotated rows, of the same norms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rotation {
    /// Keys are stored as given.
    None,
    /// A normalised Hadamard transform of each head row: spreads outlier channels, so 4-bit
    /// keys (`DType::Q4_0`) lose less.
    Hadamard,
}

impl Rotation {
    fn raw(self) -> sys::kvc_rotation {
        match self {
            Rotation::None => sys::KVC_ROTATION_NONE,
            Rotation::Hadamard => sys::KVC_ROTATION_HADAMARD,
        }
    }
}

/// When a policy compresses during prefill (`kvc_prefill_compression`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefill {
    /// Never during prefill.
    None,
    /// After the attention of every prompt chunk.
    PerChunk,
    /// Once, when the first decode token of a sequence arrives (or at `Batch::prompt_end`).
    Once,
}

impl Prefill {
    fn raw(self) -> sys::kvc_prefill_compression {
        match self {
            Prefill::None => sys::KVC_PREFILL_NONE,
            Prefill::PerChunk => sys::KVC_PREFILL_PER_CHUNK,
            Prefill::Once => sys::KVC_PREFILL_ONCE,
        }
    }
}

fn dtype_from_raw(raw: sys::kvc_dtype) -> Option<DType> {
    match raw {
        sys::KVC_DTYPE_F32 => Some(DType::F32),
        sys::KVC_DTYPE_F16 => Some(DType::F16),
        sys::KVC_DTYPE_BF16 => Some(DType::Bf16),
        sys::KVC_DTYPE_Q8_0 => Some(DType::Q8_0),
        sys::KVC_DTYPE_Q4_0 => Some(DType::Q4_0),
        _ => None,
    }
}

/// Parameters of `Context::cache`, every field of `kvc_cache_params`. `Default` (and `new`) is
/// the library's own defaults (`kvc_cache_params_init`); each field has a builder method of its
/// name: `CacheParams::new().layers(32).kv_heads(8).policy("h2o").budget(512)`.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheParams {
    pub layers: i32,
    pub kv_heads: i32,
    /// A multiple of `kv_heads`; 0: as many as `kv_heads`.
    pub q_heads: i32,
    pub head_dim: i32,
    /// Storage format of K and V unless `k_dtype` or `v_dtype` says otherwise.
    pub dtype: DType,
    pub layout: Layout,
    /// Paged: tokens per block.
    pub block_tokens: i32,
    /// Contiguous: capacity multiplier when full.
    pub growth_factor: f64,
    /// Bytes of K, V and per-token metadata.
    pub memory_limit: usize,
    /// Backend plugin name; None: "cpu".
    pub backend: Option<String>,
    /// Eviction policy plugin name; None: the cache never compresses.
    pub policy: Option<String>,
    /// Tokens kept per (sequence, layer, KV head) by the policy; 0: `budget_ratio` applies.
    pub budget: i32,
    /// In (0, 1]: the budget as a share of the tokens a head has received.
    pub budget_ratio: f64,
    /// First tokens always kept; None: the policy's default.
    pub sinks: Option<i32>,
    /// Newest tokens always kept; None: the policy's default.
    pub recent: Option<i32>,
    /// Policy-specific parameters (key, value), as in YAML (docs/policies.md).
    pub policy_params: Vec<(String, String)>,
    /// When the policy compresses during prefill.
    pub prefill: Prefill,
    /// > 0: compress every this many single-token steps.
    pub decode_every: i32,
    /// > 0: compress when a head holds more than budget + slack tokens.
    pub decode_slack: i32,
    /// Storage format of K; None: `dtype`.
    pub k_dtype: Option<DType>,
    /// Storage format of V; None: `dtype`.
    pub v_dtype: Option<DType>,
    /// The rotation of K.
    pub k_rotation: Rotation,
    /// Prefix caching (`Cache::attach_prefix`, `publish_prefix`, `lookup_prefix`); paged
    /// layout only.
    pub prefix_cache: bool,
    /// With `prefix_cache`: a store of the context that `attach_prefix` continues in where the
    /// cache has no more blocks; None: none.
    pub prefix_store: Option<String>,
    /// With `prefix_store`: `publish_prefix` also writes the blocks it makes findable to it.
    pub prefix_write_through: bool,
    /// With demotion: the share of each head's byte budget that tokens in the cache's own
    /// formats may take; the rest holds demoted tokens. In [0, 1].
    pub demote_keep: f64,
    /// With a policy: compression stores the tokens the budget cannot keep with K in this
    /// smaller format before it evicts any ("demote before evict"; paged layout only). None:
    /// K is not demoted.
    pub demote_k_dtype: Option<DType>,
    /// Likewise for V; None for both: no demotion.
    pub demote_v_dtype: Option<DType>,
}

/// Builder methods `name(self, value) -> Self`, one per field.
macro_rules! setters {
    ($($field:ident: $type:ty),* $(,)?) => {$(
        #[doc = concat!("Sets `", stringify!($field), "`.")]
        pub fn $field(mut self, value: $type) -> CacheParams {
            self.$field = value;
            self
        }
    )*};
}

/// Builder methods for the optional fields: `name(self, value)` sets `Some(value)`.
macro_rules! optional_setters {
    ($($field:ident: $type:ty),* $(,)?) => {$(
        #[doc = concat!("Sets `", stringify!($field), "` (None: the default).")]
        pub fn $field(mut self, value: impl Into<$type>) -> CacheParams {
            self.$field = Some(value.into());
            self
        }
    )*};
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
            dtype: dtype_from_raw(raw.dtype).unwrap_or(DType::F16),
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
            budget_ratio: raw.budget_ratio,
            sinks: None,
            recent: None,
            policy_params: Vec::new(),
            prefill: match raw.prefill {
                sys::KVC_PREFILL_PER_CHUNK => Prefill::PerChunk,
                sys::KVC_PREFILL_ONCE => Prefill::Once,
                _ => Prefill::None,
            },
            decode_every: raw.decode_every,
            decode_slack: raw.decode_slack,
            k_dtype: dtype_from_raw(raw.k_dtype),
            v_dtype: dtype_from_raw(raw.v_dtype),
            k_rotation: match raw.k_rotation {
                sys::KVC_ROTATION_HADAMARD => Rotation::Hadamard,
                _ => Rotation::None,
            },
            prefix_cache: raw.prefix_cache != 0,
            prefix_store: None,
            prefix_write_through: raw.prefix_write_through != 0,
            demote_keep: raw.demote_keep,
            demote_k_dtype: dtype_from_raw(raw.demote_k_dtype),
            demote_v_dtype: dtype_from_raw(raw.demote_v_dtype),
        }
    }
}

impl CacheParams {
    /// The library's defaults, as `Default`.
    pub fn new() -> CacheParams {
        CacheParams::default()
    }

    setters! {
        layers: i32,
        kv_heads: i32,
        q_heads: i32,
        head_dim: i32,
        dtype: DType,
        layout: Layout,
        block_tokens: i32,
        growth_factor: f64,
        memory_limit: usize,
        budget: i32,
        budget_ratio: f64,
        prefill: Prefill,
        decode_every: i32,
        decode_slack: i32,
        k_rotation: Rotation,
        prefix_cache: bool,
        prefix_write_through: bool,
        demote_keep: f64,
    }

    optional_setters! {
        backend: String,
        policy: String,
        sinks: i32,
        recent: i32,
        k_dtype: DType,
        v_dtype: DType,
        prefix_store: String,
        demote_k_dtype: DType,
        demote_v_dtype: DType,
    }

    /// Adds a policy-specific parameter, as in YAML.
    pub fn policy_param(mut self, key: impl Into<String>, value: impl Into<String>) -> CacheParams {
        self.policy_params.push((key.into(), value.into()));
        self
    }

    /// Calls `f` with the C struct; its strings live until `f` returns.
    pub(crate) fn with_raw<T>(&self, f: impl FnOnce(&sys::kvc_cache_params) -> Result<T>) -> Result<T> {
        let backend = self.backend.as_deref().map(|name| c_string("backend", name)).transpose()?;
        let policy = self.policy.as_deref().map(|name| c_string("policy", name)).transpose()?;
        let prefix_store =
            self.prefix_store.as_deref().map(|name| c_string("prefix_store", name)).transpose()?;
        let policy_params = self
            .policy_params
            .iter()
            .map(|(key, value)| Ok((c_string("policy parameter key", key)?, c_string(key, value)?)))
            .collect::<Result<Vec<_>>>()?;
        let entries: Vec<sys::kvc_key_value> = policy_params
            .iter()
            .map(|(key, value)| sys::kvc_key_value { key: key.as_ptr(), value: value.as_ptr() })
            .collect();
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
        raw.budget_ratio = self.budget_ratio;
        raw.sinks = self.sinks.unwrap_or(-1);
        raw.recent = self.recent.unwrap_or(-1);
        raw.policy_params = if entries.is_empty() { ptr::null() } else { entries.as_ptr() };
        raw.n_policy_params = entries.len();
        raw.prefill = self.prefill.raw();
        raw.decode_every = self.decode_every;
        raw.decode_slack = self.decode_slack;
        raw.k_dtype = self.k_dtype.map_or(-1, DType::raw);
        raw.v_dtype = self.v_dtype.map_or(-1, DType::raw);
        raw.k_rotation = self.k_rotation.raw();
        raw.prefix_cache = i32::from(self.prefix_cache);
        raw.prefix_store = prefix_store.as_ref().map_or(ptr::null(), |name| name.as_ptr());
        raw.prefix_write_through = i32::from(self.prefix_write_through);
        raw.demote_keep = self.demote_keep;
        raw.demote_k_dtype = self.demote_k_dtype.map_or(-1, DType::raw);
        raw.demote_v_dtype = self.demote_v_dtype.map_or(-1, DType::raw);
        f(&raw)
    }
}
