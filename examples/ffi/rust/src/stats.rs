//! `Stats`: a cache's memory and token counters (`kvc_cache_get_stats`).
use std::mem::{size_of, MaybeUninit};

use crate::error::{check, Result};
use crate::sys;

/// Memory and token counters of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
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
    /// Of `bytes_used`, what more than one sequence holds (blocks shared by a fork or by
    /// `Cache::attach_prefix`).
    pub bytes_shared: usize,
    /// Of `bytes_used`, blocks that only the prefix cache holds (no live sequence), given back,
    /// least recently used first, as soon as a call needs the memory.
    pub bytes_cached: usize,
    /// Bytes of cached blocks given back so far to make room.
    pub bytes_reclaimed: u64,
    /// `Cache::attach_prefix` calls that attached at least one block.
    pub prefix_hits: u64,
    /// Tokens those calls attached, summed.
    pub prefix_tokens_reused: u64,
    /// Tokens compression moved into a head's demoted tier (`CacheParams::demote_k_dtype`,
    /// `demote_v_dtype`), summed over (sequence, layer, KV head).
    pub tokens_demoted: u64,
}

impl Stats {
    pub(crate) fn read(cache: *const sys::kvc_cache) -> Result<Stats> {
        let mut raw = MaybeUninit::<sys::kvc_cache_stats>::uninit();
        // SAFETY: init zero-fills and sets struct_size. Callers hold the cache without
        // concurrent calls.
        unsafe {
            sys::kvc_cache_stats_init_sized(raw.as_mut_ptr(), size_of::<sys::kvc_cache_stats>());
            check(sys::kvc_cache_get_stats(cache, raw.as_mut_ptr()))?;
            let raw = raw.assume_init();
            Ok(Stats {
                bytes_used: raw.bytes_used,
                bytes_peak: raw.bytes_peak,
                bytes_limit: raw.bytes_limit,
                bytes_reserved: raw.bytes_reserved,
                tokens_stored: raw.tokens_stored,
                tokens_evicted: raw.tokens_evicted,
                bytes_copied: raw.bytes_copied,
                blocks_used: raw.blocks_used,
                blocks_free: raw.blocks_free,
                sequences: raw.sequences,
                bytes_shared: raw.bytes_shared,
                bytes_cached: raw.bytes_cached,
                bytes_reclaimed: raw.bytes_reclaimed,
                prefix_hits: raw.prefix_hits,
                prefix_tokens_reused: raw.prefix_tokens_reused,
                tokens_demoted: raw.tokens_demoted,
            })
        }
    }
}
