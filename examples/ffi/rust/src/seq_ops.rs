//! The calls that name sequences (data path, compression, per-sequence edits and reads),
//! inherent on `Cache` and on `Shard` alike: `sequence_calls!` writes them into both, each type
//! giving `access`, its cache pointer once it may name the sequences.
use std::ptr::NonNull;

use crate::cache::Shape;
use crate::sys;

/// A cache pointer with what the checks before a call need.
#[derive(Clone, Copy)]
pub(crate) struct Handle {
    pub raw: NonNull<sys::kvc_cache>,
    pub shape: Shape,
    /// Whether the backend's memory is host memory (the CPU backend), so views into it may be
    /// read.
    pub host: bool,
}

/// Writes the calls that name sequences as inherent methods of `$type`, which provides
/// `fn access(&self, seq_ids: &[i32]) -> Result<Handle>`. Those that change a sequence take
/// `&mut self`; reads take `&self` (neither `Cache` nor `Shard` is `Sync`, so a read never
/// overlaps a write). The anonymous const scopes the imports the methods need.
macro_rules! sequence_calls {
    ($type:ty) => {
        const _: () = {
            use std::ops::Range;
            use std::path::Path;
            use std::ptr;

            use crate::data::{check_len, input, output, Attention, Batch, Heads};
            use crate::error::{check, Code, Error, Result};
            use crate::policy::StatKind;
            use crate::stores::Prefix;
            use crate::strings::{c_path, c_string};
            use crate::sys;

            impl $type {
                /// Stores the new tokens' K and V, `[batch.tokens(), kv_heads, head_dim]` each.
                /// All or nothing: past the memory limit nothing is stored (`OutOfMemory`).
                pub fn append(&mut self, layer: i32, batch: &Batch, k: &[f32], v: &[f32]) -> Result<()> {
                    let h = self.access(batch.seq_ids())?;
                    check_len("k", k.len(), batch.tokens(), Heads::Kv, &h.shape)?;
                    check_len("v", v.len(), batch.tokens(), Heads::Kv, &h.shape)?;
                    let raw_batch = batch.raw()?;
                    // SAFETY: the handle may name these sequences; lengths checked; arrays outlive the call.
                    check(unsafe { sys::kvc_append(h.raw.as_ptr(), layer, &raw_batch, &input(k), &input(v)) })
                }

                /// Attention of `q` (`[tokens, q_heads, head_dim]`) over what is stored, into `out` (same
                /// shape).
                pub fn attend(
                    &mut self,
                    layer: i32,
                    batch: &Batch,
                    q: &[f32],
                    attention: &Attention,
                    out: &mut [f32],
                ) -> Result<()> {
                    let h = self.access(batch.seq_ids())?;
                    check_len("q", q.len(), batch.tokens(), Heads::Query, &h.shape)?;
                    check_len("out", out.len(), batch.tokens(), Heads::Query, &h.shape)?;
                    let raw_batch = batch.raw()?;
                    let mut out = output(out);
                    // SAFETY: as in append; `out` is written during the call only.
                    check(unsafe {
                        sys::kvc_attend(
                            h.raw.as_ptr(),
                            layer,
                            &raw_batch,
                            &input(q),
                            &attention.raw(),
                            &mut out,
                        )
                    })
                }

                /// `append` then `attend` in one call; on error nothing is stored.
                #[allow(clippy::too_many_arguments)]
                pub fn append_attend(
                    &mut self,
                    layer: i32,
                    batch: &Batch,
                    q: &[f32],
                    k: &[f32],
                    v: &[f32],
                    attention: &Attention,
                    out: &mut [f32],
                ) -> Result<()> {
                    let h = self.access(batch.seq_ids())?;
                    check_len("q", q.len(), batch.tokens(), Heads::Query, &h.shape)?;
                    check_len("k", k.len(), batch.tokens(), Heads::Kv, &h.shape)?;
                    check_len("v", v.len(), batch.tokens(), Heads::Kv, &h.shape)?;
                    check_len("out", out.len(), batch.tokens(), Heads::Query, &h.shape)?;
                    let raw_batch = batch.raw()?;
                    let mut out = output(out);
                    // SAFETY: as in append and attend.
                    check(unsafe {
                        sys::kvc_append_attend(
                            h.raw.as_ptr(),
                            layer,
                            &raw_batch,
                            &input(q),
                            &input(k),
                            &input(v),
                            &attention.raw(),
                            &mut out,
                        )
                    })
                }

                /// Compresses the sequences now, on `layer` or (None) every layer.
                pub fn compress(&mut self, layer: Option<i32>, seq_ids: &[i32]) -> Result<()> {
                    let h = self.access(seq_ids)?;
                    // SAFETY: the handle may name these sequences; the array is read during the call.
                    check(unsafe {
                        sys::kvc_compress(
                            h.raw.as_ptr(),
                            layer.unwrap_or(-1),
                            seq_ids.len() as i32,
                            seq_ids.as_ptr(),
                        )
                    })
                }

                /// Reports a statistic computed by the engine: one value per stored token of
                /// (sequence, layer, KV head), in storage order.
                pub fn report_stats(
                    &mut self,
                    seq_id: i32,
                    layer: i32,
                    kv_head: i32,
                    kind: StatKind,
                    values: &[f32],
                ) -> Result<()> {
                    let h = self.access(&[seq_id])?;
                    let n_values = i32::try_from(values.len())
                        .map_err(|_| Error::invalid(format!("{} values are too many", values.len())))?;
                    // SAFETY: the handle may name the sequence; `values` is read during the call.
                    check(unsafe {
                        sys::kvc_report_stats(
                            h.raw.as_ptr(),
                            seq_id,
                            layer,
                            kv_head,
                            kind.raw(),
                            values.as_ptr(),
                            n_values,
                        )
                    })
                }

                /// Makes room for `tokens` tokens on every layer and KV head without allocating later.
                pub fn reserve(&mut self, seq_id: i32, tokens: i32) -> Result<()> {
                    let h = self.access(&[seq_id])?;
                    // SAFETY: the handle may name the sequence.
                    check(unsafe { sys::kvc_seq_reserve(h.raw.as_ptr(), seq_id, tokens) })
                }

                /// Drops every stored token at positions >= `position`.
                pub fn truncate(&mut self, seq_id: i32, position: i32) -> Result<()> {
                    let h = self.access(&[seq_id])?;
                    // SAFETY: the handle may name the sequence.
                    check(unsafe { sys::kvc_seq_truncate(h.raw.as_ptr(), seq_id, position) })
                }

                /// Drops the stored tokens at positions in `positions`.
                pub fn remove_range(&mut self, seq_id: i32, positions: Range<i32>) -> Result<()> {
                    let h = self.access(&[seq_id])?;
                    // SAFETY: the handle may name the sequence.
                    check(unsafe {
                        sys::kvc_seq_remove_range(h.raw.as_ptr(), seq_id, positions.start, positions.end)
                    })
                }

                /// Everything stored for the sequence, in the format of docs/sequence_format.md.
                pub fn export(&self, seq_id: i32) -> Result<Vec<u8>> {
                    let h = self.access(&[seq_id])?;
                    let mut size = 0;
                    let mut written = 0;
                    // SAFETY: the handle may name the sequence; the buffer holds `size` bytes, and the
                    // sequence cannot change between the two calls (&self, not Sync).
                    unsafe {
                        check(sys::kvc_seq_export_size(h.raw.as_ptr(), seq_id, &mut size))?;
                        let mut bytes = vec![0u8; size];
                        check(sys::kvc_seq_export(
                            h.raw.as_ptr(),
                            seq_id,
                            bytes.as_mut_ptr().cast(),
                            size,
                            &mut written,
                        ))?;
                        bytes.truncate(written);
                        Ok(bytes)
                    }
                }

                /// `export` into a file, replaced atomically.
                pub fn export_file(&self, seq_id: i32, path: &Path) -> Result<()> {
                    let h = self.access(&[seq_id])?;
                    let path = c_path(path)?;
                    // SAFETY: the handle may name the sequence; a valid C string.
                    check(unsafe { sys::kvc_seq_export_file(h.raw.as_ptr(), seq_id, path.as_ptr()) })
                }

                /// Saves the K/V of the whole chunks of `prefix` that the sequence holds to `store`,
                /// skipping chunks already there, and returns the tokens those chunks cover. Every (layer,
                /// KV head) must hold positions 0, 1, ... up to the last saved token (`Unsupported`
                /// otherwise, before anything is written): save right after the prefix's prefill.
                pub fn save_prefix(&self, seq_id: i32, store: &str, prefix: &Prefix) -> Result<i32> {
                    let h = self.access(&[seq_id])?;
                    let store = c_string("store", store)?;
                    prefix.with_raw(|raw| {
                        let mut saved = 0;
                        // SAFETY: the handle may name the sequence; the struct's pointers and the C string
                        // outlive the call.
                        check(unsafe {
                            sys::kvc_prefix_save(h.raw.as_ptr(), seq_id, store.as_ptr(), raw, &mut saved)
                        })?;
                        Ok(saved)
                    })
                }

                /// Makes the full blocks of the sequence that hold the first tokens of `prefix` (the
                /// token ids of positions 0, 1, ...) findable by `Cache::attach_prefix`, and returns the
                /// tokens they cover: the whole blocks that every (layer, KV head) holds in order from
                /// position 0. With the cache's `prefix_write_through`, also writes them to its
                /// `prefix_store`. `Unsupported` for a cache without `prefix_cache`.
                pub fn publish_prefix(&self, seq_id: i32, prefix: &Prefix) -> Result<i32> {
                    let h = self.access(&[seq_id])?;
                    prefix.with_raw(|raw| {
                        let mut published = 0;
                        // SAFETY: the handle may name the sequence; the struct's pointers outlive the call.
                        check(unsafe {
                            sys::kvc_prefix_publish(h.raw.as_ptr(), seq_id, raw, &mut published)
                        })?;
                        Ok(published)
                    })
                }

                /// Tokens stored for (sequence, layer, KV head).
                pub fn length(&self, seq_id: i32, layer: i32, kv_head: i32) -> Result<i32> {
                    let h = self.access(&[seq_id])?;
                    let mut length = 0;
                    // SAFETY: the handle may name the sequence.
                    check(unsafe {
                        sys::kvc_seq_length(h.raw.as_ptr(), seq_id, layer, kv_head, &mut length)
                    })?;
                    Ok(length)
                }

                /// The positions stored for (sequence, layer, KV head), in storage order (copied from
                /// `kvc_seq_view`). `Unsupported` unless the backend's memory is host memory.
                pub fn positions(&self, seq_id: i32, layer: i32, kv_head: i32) -> Result<Vec<i32>> {
                    let h = self.access(&[seq_id])?;
                    if !h.host {
                        return Err(Error::new(
                            Code::Unsupported,
                            "positions: the backend's memory is not host memory".into(),
                        ));
                    }
                    let mut count = 0;
                    // SAFETY: the handle may name the sequence; views are read at once (nothing can change
                    // the sequence meanwhile: &self, not Sync), and the CPU backend's memory is host memory.
                    unsafe {
                        check(sys::kvc_seq_view(
                            h.raw.as_ptr(),
                            seq_id,
                            layer,
                            kv_head,
                            ptr::null_mut(),
                            0,
                            &mut count,
                        ))?;
                        let capacity = count;
                        let mut views = Vec::with_capacity(capacity);
                        check(sys::kvc_seq_view(
                            h.raw.as_ptr(),
                            seq_id,
                            layer,
                            kv_head,
                            views.as_mut_ptr(),
                            capacity,
                            &mut count,
                        ))?;
                        views.set_len(count.min(capacity));
                        Ok(views
                            .iter()
                            .filter(|view: &&sys::kvc_segment_view| view.count > 0)
                            .flat_map(|view| std::slice::from_raw_parts(view.pos, view.count as usize))
                            .copied()
                            .collect())
                    }
                }
            }
        };
    };
}
pub(crate) use sequence_calls;
