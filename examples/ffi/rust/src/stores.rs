//! Stores (kvcache.h "stores"): offloading a sequence to a store and restoring it, dropping a
//! stored value, and sharing a prompt prefix's K/V in chunks. The stores are configured in the
//! context's YAML (`stores:`) and named by the calls; `save_prefix` is in seq_ops.rs.
use std::mem::{size_of, MaybeUninit};
use std::ptr;

use crate::cache::Cache;
use crate::context::Context;
use crate::error::{check, Error, Result};
use crate::strings::c_string;
use crate::sys;

/// A prompt prefix whose K/V is shared through a store in chunks of `chunk_tokens` tokens,
/// each chunk keyed by the model, the cache's shape and every token id up to the chunk's end,
/// so that any cache of the same shape, in any process, finds the chunks it shares; and, with
/// `chunk_tokens` ignored, the prompt the prefix cache publishes and attaches by blocks
/// (prefix_cache.rs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// Identifies the weights (e.g. a hash of the model file), not empty: K/V of one model must
    /// never be restored into another.
    pub model: String,
    /// The prefix's token ids, position 0 first.
    pub token_ids: Vec<i32>,
    /// Tokens per chunk, 1..=65536; only whole chunks are saved or restored.
    pub chunk_tokens: i32,
}

impl Prefix {
    /// A prefix with the library's default chunk size.
    pub fn new(model: impl Into<String>, token_ids: impl Into<Vec<i32>>) -> Prefix {
        let mut raw = MaybeUninit::<sys::kvc_prefix>::uninit();
        // SAFETY: kvc_prefix_init_sized writes every field and keeps no pointer.
        let defaults = unsafe {
            sys::kvc_prefix_init_sized(
                raw.as_mut_ptr(),
                size_of::<sys::kvc_prefix>(),
                ptr::null(),
                ptr::null(),
                0,
            );
            raw.assume_init()
        };
        Prefix { model: model.into(), token_ids: token_ids.into(), chunk_tokens: defaults.chunk_tokens }
    }

    /// Sets the tokens per chunk.
    pub fn chunk_tokens(mut self, tokens: i32) -> Prefix {
        self.chunk_tokens = tokens;
        self
    }

    /// Calls `f` with the C struct; its string and array live until `f` returns.
    pub(crate) fn with_raw<T>(&self, f: impl FnOnce(&sys::kvc_prefix) -> Result<T>) -> Result<T> {
        let model = c_string("prefix.model", &self.model)?;
        let n_tokens = i32::try_from(self.token_ids.len()).map_err(|_| {
            Error::invalid(format!("prefix: {} token ids are too many", self.token_ids.len()))
        })?;
        let mut raw = MaybeUninit::<sys::kvc_prefix>::uninit();
        // SAFETY: kvc_prefix_init_sized writes every field; the pointers it stores outlive `f`.
        let mut raw = unsafe {
            sys::kvc_prefix_init_sized(
                raw.as_mut_ptr(),
                size_of::<sys::kvc_prefix>(),
                model.as_ptr(),
                self.token_ids.as_ptr(),
                n_tokens,
            );
            raw.assume_init()
        };
        raw.chunk_tokens = self.chunk_tokens;
        f(&raw)
    }
}

impl Context {
    /// Deletes the value under `key` in `store`; `NotFound` when there is none.
    pub fn store_drop(&self, store: &str, key: &str) -> Result<()> {
        let store = c_string("store", store)?;
        let key = c_string("key", key)?;
        // SAFETY: a live context (thread-safe) and valid C strings.
        check(unsafe { sys::kvc_store_drop(self.raw(), store.as_ptr(), key.as_ptr()) })
    }
}

impl Cache {
    /// Writes the sequence's export image to `store` under `key` (replacing any value), then
    /// removes the sequence. On any error, the store's included, the sequence stays as it was.
    pub fn offload(&mut self, seq_id: i32, store: &str, key: &str) -> Result<()> {
        let store = c_string("store", store)?;
        let key = c_string("key", key)?;
        // SAFETY: &mut self: exclusive access, as removing a sequence requires; valid C strings.
        check(unsafe { sys::kvc_seq_offload(self.raw(), seq_id, store.as_ptr(), key.as_ptr()) })
    }

    /// Creates `seq_id` from the value under `key` in `store`, as `import` does; the value stays
    /// in the store (`Context::store_drop` removes it).
    pub fn restore(&mut self, seq_id: i32, store: &str, key: &str) -> Result<()> {
        let store = c_string("store", store)?;
        let key = c_string("key", key)?;
        // SAFETY: exclusive access (a restore creates a sequence); valid C strings.
        check(unsafe { sys::kvc_seq_restore(self.raw(), seq_id, store.as_ptr(), key.as_ptr()) })
    }

    /// Creates `seq_id` holding the longest run of `prefix`'s chunks found in `store`, from
    /// chunk 0 on, and returns the tokens restored (a multiple of `chunk_tokens`, possibly 0:
    /// the sequence is then empty). The engine prefills the rest from there.
    pub fn load_prefix(&mut self, seq_id: i32, store: &str, prefix: &Prefix) -> Result<i32> {
        let store = c_string("store", store)?;
        prefix.with_raw(|raw| {
            let mut restored = 0;
            // SAFETY: exclusive access (a load creates a sequence); the struct's pointers and the
            // C string outlive the call.
            check(unsafe { sys::kvc_prefix_load(self.raw(), seq_id, store.as_ptr(), raw, &mut restored) })?;
            Ok(restored)
        })
    }
}
