//! The prefix cache (kvcache.h "prefix cache"): a cache created with
//! `CacheParams::prefix_cache` keeps the full blocks a sequence published, by the token ids
//! they hold, so that a later prompt sharing them attaches them instead of computing them again.
//! `publish_prefix` names a sequence and is in seq_ops.rs; a `Prefix`'s `chunk_tokens` is
//! ignored here, the unit being the cache's block.
use crate::cache::Cache;
use crate::error::{check, Result};
use crate::stores::Prefix;
use crate::sys;

impl Cache {
    /// Creates `seq_id` (`AlreadyExists` when it exists) sharing the longest run of published
    /// full blocks of `prefix` on every (layer, KV head), continued in the cache's
    /// `prefix_store` if it has one, and returns the tokens attached (a multiple of
    /// `block_tokens`, possibly 0: the sequence is then empty); the engine prefills the rest
    /// from there. `Unsupported` for a cache without `prefix_cache`.
    pub fn attach_prefix(&mut self, seq_id: i32, prefix: &Prefix) -> Result<i32> {
        prefix.with_raw(|raw| {
            let mut attached = 0;
            // SAFETY: exclusive access (an attach creates a sequence); the struct's pointers
            // outlive the call.
            check(unsafe { sys::kvc_prefix_attach(self.raw(), seq_id, raw, &mut attached) })?;
            Ok(attached)
        })
    }

    /// The tokens `attach_prefix` would attach from the cache itself now (the store is not
    /// asked); changes nothing but the blocks' recency.
    pub fn lookup_prefix(&self, prefix: &Prefix) -> Result<i32> {
        prefix.with_raw(|raw| {
            let mut tokens = 0;
            // SAFETY: a live cache (not Sync: no call overlaps this one); the struct's pointers
            // outlive the call.
            check(unsafe { sys::kvc_prefix_lookup(self.raw(), raw, &mut tokens) })?;
            Ok(tokens)
        })
    }
}
