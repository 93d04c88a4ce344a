//! `Shard`: a part of a cache's sequences that one thread may work on.
use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::seq_ops::{sequence_calls, Handle};

/// The sequences of one group of `Cache::split`. `Send`, so each shard can move to its own
/// thread; not `Sync`, like the cache. Every call names only the shard's sequences (others are
/// an `InvalidArgument` error before the call), which is what makes calls on different shards
/// safe to run at once: kvcache.h allows concurrent calls on disjoint sequences.
pub struct Shard<'c> {
    handle: Handle,
    seq_ids: Vec<i32>,
    _cache: PhantomData<&'c mut ()>,
}

// SAFETY: shards name disjoint sequences (checked by split and handle()), and a shard is not
// Sync, so at most one call per shard runs at a time.
unsafe impl Send for Shard<'_> {}

impl Shard<'_> {
    pub(crate) fn new(handle: Handle, seq_ids: Vec<i32>) -> Self {
        Shard { handle, seq_ids, _cache: PhantomData }
    }

    /// The sequence ids this shard may name.
    pub fn seq_ids(&self) -> &[i32] {
        &self.seq_ids
    }
}

impl Shard<'_> {
    /// The cache, once every id in `seq_ids` is one of this shard's.
    fn access(&self, seq_ids: &[i32]) -> Result<Handle> {
        match seq_ids.iter().find(|id| !self.seq_ids.contains(id)) {
            Some(id) => Err(Error::invalid(format!(
                "sequence {id} is not in this shard (its sequences: {:?})",
                self.seq_ids
            ))),
            None => Ok(self.handle),
        }
    }
}

sequence_calls!(Shard<'_>);
