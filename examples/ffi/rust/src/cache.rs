//! `Cache`: one model shape's K/V store. Creation, sequence creation and removal, and the
//! cache-wide reads; the per-sequence calls are written by `sequence_calls!` (seq_ops.rs).
use std::ffi::{c_void, CStr};
use std::mem::{size_of, MaybeUninit};
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::context::Context;
use crate::error::{check, Error, Result};
use crate::params::CacheParams;
use crate::policy::PolicyInfo;
use crate::seq_ops::{sequence_calls, Handle};
use crate::shard::Shard;
use crate::stats::Stats;
use crate::strings::{c_path, c_string};
use crate::sys;

/// The shape a cache was created with (defaults filled in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub layers: i32,
    pub kv_heads: i32,
    pub q_heads: i32,
    pub head_dim: i32,
}

/// The prompt and decode lengths of `Cache::estimate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EstimateRequest {
    pub prompt_tokens: i32,
    /// Prompt tokens per prefill batch (the last chunk may be shorter).
    pub chunk_tokens: i32,
    /// Tokens decoded one at a time after the prompt.
    pub new_tokens: i32,
    /// The engine marks the prompt's last chunk (`Batch::prompt_end`).
    pub marks_prompt_end: bool,
}

/// A cache. It holds its context (a shared handle), which therefore lives at least as long.
///
/// Threading, as kvcache.h states it: calls on disjoint sequences may run concurrently;
/// creating, forking, importing and removing sequences need exclusive access. Here the
/// latter take `&mut self`, as do the calls that change a sequence. `Cache` is `Send` but not
/// `Sync`, so its `&self` calls never run on two threads at once; to work on disjoint
/// sequences from several threads, `split` it into `Shard`s.
pub struct Cache {
    handle: Handle,
    context: Context,
}

// SAFETY: nothing in a cache is tied to the thread that created it.
unsafe impl Send for Cache {}

impl EstimateRequest {
    /// A request whose prompt's last chunk is not marked; `.marks_prompt_end(true)` marks it.
    pub fn new(prompt_tokens: i32, chunk_tokens: i32, new_tokens: i32) -> EstimateRequest {
        EstimateRequest { prompt_tokens, chunk_tokens, new_tokens, marks_prompt_end: false }
    }

    pub fn marks_prompt_end(mut self, marks: bool) -> EstimateRequest {
        self.marks_prompt_end = marks;
        self
    }
}

impl Context {
    /// Creates a cache from parameters.
    pub fn cache(&self, params: &CacheParams) -> Result<Cache> {
        let mut raw = ptr::null_mut();
        params.with_raw(|params| {
            // SAFETY: a live context, a filled params struct whose strings outlive the call.
            check(unsafe { sys::kvc_cache_create(self.raw(), params, &mut raw) })
        })?;
        Cache::adopt(self, raw)
    }

    /// Creates a cache from YAML holding `cache:` and optionally `backend:` and `policy:`
    /// sections; None uses the context's own configuration.
    pub fn cache_from_yaml(&self, yaml: Option<&str>) -> Result<Cache> {
        let yaml = yaml.map(|text| c_string("yaml", text)).transpose()?;
        let text = yaml.as_ref().map_or(ptr::null(), |text| text.as_ptr());
        let mut raw = ptr::null_mut();
        // SAFETY: a live context and a C string or NULL.
        check(unsafe { sys::kvc_cache_create_from_yaml(self.raw(), text, &mut raw) })?;
        Cache::adopt(self, raw)
    }
}

impl Cache {
    /// Takes ownership of a new cache of `context` and reads back its shape.
    fn adopt(context: &Context, raw: *mut sys::kvc_cache) -> Result<Cache> {
        let raw = NonNull::new(raw).expect("kvc_cache_create succeeded with NULL");
        let mut params = MaybeUninit::<sys::kvc_cache_params>::uninit();
        // SAFETY: init sets struct_size; get_params fills the rest (its backend string lives
        // as long as the cache and is read at once). On failure the new cache is destroyed.
        let (shape, host) = unsafe {
            sys::kvc_cache_params_init_sized(params.as_mut_ptr(), size_of::<sys::kvc_cache_params>());
            if let Err(err) = check(sys::kvc_cache_get_params(raw.as_ptr(), params.as_mut_ptr())) {
                sys::kvc_cache_destroy(raw.as_ptr());
                return Err(err);
            }
            let params = params.assume_init();
            let shape = Shape {
                layers: params.layers,
                kv_heads: params.kv_heads,
                q_heads: params.q_heads,
                head_dim: params.head_dim,
            };
            (shape, params.backend.is_null() || CStr::from_ptr(params.backend).to_bytes() == b"cpu")
        };
        Ok(Cache { handle: Handle { raw, shape, host }, context: context.clone() })
    }

    pub(crate) fn raw(&self) -> *mut sys::kvc_cache {
        self.handle.raw.as_ptr()
    }

    /// The context the cache was created from.
    pub fn context(&self) -> &Context {
        &self.context
    }

    pub fn shape(&self) -> Shape {
        self.handle.shape
    }

    /// Memory and token counters.
    pub fn stats(&self) -> Result<Stats> {
        Stats::read(self.handle.raw.as_ptr())
    }

    /// The policy in effect; `NotFound` for a cache without one.
    pub fn policy_info(&self) -> Result<PolicyInfo> {
        PolicyInfo::read(self.handle.raw.as_ptr())
    }

    /// Peak bytes one sequence holds for a prompt of `prompt_tokens` arriving in chunks of
    /// `chunk_tokens`, then `new_tokens` decoded one at a time.
    pub fn estimate_peak_bytes(
        &self,
        prompt_tokens: i32,
        chunk_tokens: i32,
        new_tokens: i32,
    ) -> Result<usize> {
        let mut bytes = 0;
        // SAFETY: a live cache; a const call that names no sequence, and &self is never shared
        // across threads (Cache is not Sync).
        check(unsafe {
            sys::kvc_cache_estimate_peak_bytes(
                self.handle.raw.as_ptr(),
                prompt_tokens,
                chunk_tokens,
                new_tokens,
                &mut bytes,
            )
        })?;
        Ok(bytes)
    }

    /// Peak bytes one sequence holds for `request`: `estimate_peak_bytes`, with the prompt's
    /// last chunk marked or not.
    pub fn estimate(&self, request: &EstimateRequest) -> Result<usize> {
        let mut raw = MaybeUninit::<sys::kvc_estimate_request>::uninit();
        // SAFETY: init writes every field.
        let mut raw = unsafe {
            sys::kvc_estimate_request_init_sized(
                raw.as_mut_ptr(),
                size_of::<sys::kvc_estimate_request>(),
                request.prompt_tokens,
                request.chunk_tokens,
                request.new_tokens,
            );
            raw.assume_init()
        };
        raw.marks_prompt_end = request.marks_prompt_end.into();
        let mut bytes = 0;
        // SAFETY: as in estimate_peak_bytes; the request is read during the call only.
        check(unsafe { sys::kvc_cache_estimate(self.handle.raw.as_ptr(), &raw, &mut bytes) })?;
        Ok(bytes)
    }

    /// Sets the backend stream (for the CUDA backend a `cudaStream_t`) that the cache's calls
    /// which name none are ordered on; null: the backend's default. The CPU backend ignores it.
    ///
    /// # Safety
    /// `stream` must be a stream of the cache's backend (or null) and stay valid while calls
    /// of this cache may use it, until another is set or the cache is dropped.
    pub unsafe fn set_stream(&mut self, stream: *mut c_void) -> Result<()> {
        // SAFETY: &mut self: exclusive access, as setting the stream requires; the caller
        // vouches for the stream.
        check(unsafe { sys::kvc_cache_set_stream(self.handle.raw.as_ptr(), stream) })
    }

    /// Creates an empty sequence (ids are chosen by the caller, >= 0).
    pub fn create_seq(&mut self, seq_id: i32) -> Result<()> {
        // SAFETY: &mut self: exclusive access, as creating a sequence requires.
        check(unsafe { sys::kvc_seq_create(self.handle.raw.as_ptr(), seq_id) })
    }

    /// Removes a sequence and returns its memory to the pool.
    pub fn remove_seq(&mut self, seq_id: i32) -> Result<()> {
        // SAFETY: exclusive access.
        check(unsafe { sys::kvc_seq_remove(self.handle.raw.as_ptr(), seq_id) })
    }

    /// Creates `dst` as a fork of `src`, sharing its K/V blocks until either writes them.
    pub fn fork(&mut self, src: i32, dst: i32) -> Result<()> {
        // SAFETY: exclusive access (a fork creates a sequence).
        check(unsafe { sys::kvc_seq_fork(self.handle.raw.as_ptr(), src, dst) })
    }

    /// Creates `seq_id` from bytes of `export`.
    pub fn import(&mut self, seq_id: i32, bytes: &[u8]) -> Result<()> {
        // SAFETY: exclusive access; the slice is read during the call only.
        check(unsafe {
            sys::kvc_seq_import(self.handle.raw.as_ptr(), seq_id, bytes.as_ptr().cast(), bytes.len())
        })
    }

    /// Creates `seq_id` from a file of `export_file`.
    pub fn import_file(&mut self, seq_id: i32, path: &Path) -> Result<()> {
        let path = c_path(path)?;
        // SAFETY: exclusive access and a valid C string.
        check(unsafe { sys::kvc_seq_import_file(self.handle.raw.as_ptr(), seq_id, path.as_ptr()) })
    }

    /// Splits the cache into shards, one per group of sequence ids, for calls from several
    /// threads: each shard may only name its own sequences, and no two groups share one.
    /// While shards live the cache is borrowed, so no sequence can be created or removed.
    pub fn split(&mut self, groups: &[&[i32]]) -> Result<Vec<Shard<'_>>> {
        let mut seen = std::collections::HashSet::new();
        for &seq_id in groups.iter().flat_map(|group| group.iter()) {
            if !seen.insert(seq_id) {
                return Err(Error::invalid(format!("split: sequence {seq_id} is in more than one group")));
            }
        }
        Ok(groups.iter().map(|group| Shard::new(self.handle, group.to_vec())).collect())
    }
}

impl Cache {
    /// The cache may name every sequence.
    fn access(&self, _seq_ids: &[i32]) -> Result<Handle> {
        Ok(self.handle)
    }
}

sequence_calls!(Cache);

impl Drop for Cache {
    fn drop(&mut self) {
        // SAFETY: we own the cache and hold exclusive access; the context, a field, is dropped
        // after this.
        unsafe { sys::kvc_cache_destroy(self.handle.raw.as_ptr()) }
    }
}
