//! `Batch` and `Attention`, and the shape checks done before a data-path call.
use std::collections::HashSet;

use crate::cache::Shape;
use crate::error::{Error, Result};
use crate::sys;

/// New tokens of several sequences on one layer: sequence by sequence, each with the
/// absolute positions of its tokens. Rows of q, k, v and out follow the same order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    seq_ids: Vec<i32>,
    n_tokens: Vec<i32>,
    positions: Vec<i32>,
    /// Per sequence, 1 where its tokens end its prompt (`kvc_batch::prompt_end`).
    prompt_end: Vec<i32>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Adds sequence `seq_id` with new tokens at `positions`.
    pub fn seq(self, seq_id: i32, positions: impl IntoIterator<Item = i32>) -> Batch {
        self.push(seq_id, positions, false)
    }

    /// Adds sequence `seq_id` with the last chunk of its prompt at `positions`: with prefill
    /// compression `once`, the attention over it compresses that layer of the sequence at once
    /// instead of at its first decode token.
    pub fn prompt_end(self, seq_id: i32, positions: impl IntoIterator<Item = i32>) -> Batch {
        self.push(seq_id, positions, true)
    }

    fn push(mut self, seq_id: i32, positions: impl IntoIterator<Item = i32>, prompt_end: bool) -> Batch {
        let before = self.positions.len();
        self.positions.extend(positions);
        self.seq_ids.push(seq_id);
        self.n_tokens.push((self.positions.len() - before) as i32);
        self.prompt_end.push(prompt_end.into());
        self
    }

    /// Sequence ids, in batch order.
    pub fn seq_ids(&self) -> &[i32] {
        &self.seq_ids
    }

    /// Total new tokens (rows).
    pub fn tokens(&self) -> usize {
        self.positions.len()
    }

    /// The C view of the batch, after checking what the library requires of it.
    pub(crate) fn raw(&self) -> Result<sys::kvc_batch> {
        if self.seq_ids.is_empty() {
            return Err(Error::invalid("batch: no sequence".into()));
        }
        if let Some(i) = self.n_tokens.iter().position(|&n| n < 1) {
            return Err(Error::invalid(format!("batch: sequence {} has no token", self.seq_ids[i])));
        }
        let mut seen = HashSet::new();
        if let Some(id) = self.seq_ids.iter().find(|id| !seen.insert(**id)) {
            return Err(Error::invalid(format!("batch: sequence {id} is listed twice")));
        }
        let mut raw = std::mem::MaybeUninit::<sys::kvc_batch>::uninit();
        // SAFETY: kvc_batch_init_sized writes every field; the arrays outlive the returned struct's
        // use because it is used while &self is borrowed.
        unsafe {
            sys::kvc_batch_init_sized(
                raw.as_mut_ptr(),
                std::mem::size_of::<sys::kvc_batch>(),
                self.seq_ids.len() as i32,
                self.seq_ids.as_ptr(),
                self.n_tokens.as_ptr(),
                self.positions.as_ptr(),
            );
            let mut raw = raw.assume_init();
            raw.prompt_end = self.prompt_end.as_ptr();
            Ok(raw)
        }
    }
}

/// Attention options; `Default` is `kvc_attention_params_init`'s.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Attention {
    /// Logit scale; 0: 1/sqrt(head_dim).
    pub scale: f32,
    /// > 0: a query at p sees keys at positions (p - window, p].
    pub sliding_window: i32,
    /// > 0: logits become softcap * tanh(logit / softcap).
    pub softcap: f32,
}

impl Attention {
    /// The defaults, as `Default`; then `.scale(..)`, `.sliding_window(..)`, `.softcap(..)`.
    pub fn new() -> Attention {
        Attention::default()
    }

    pub fn scale(mut self, scale: f32) -> Attention {
        self.scale = scale;
        self
    }

    pub fn sliding_window(mut self, tokens: i32) -> Attention {
        self.sliding_window = tokens;
        self
    }

    pub fn softcap(mut self, softcap: f32) -> Attention {
        self.softcap = softcap;
        self
    }

    pub(crate) fn raw(&self) -> sys::kvc_attention_params {
        let mut raw = std::mem::MaybeUninit::<sys::kvc_attention_params>::uninit();
        // SAFETY: init writes every field.
        let mut raw = unsafe {
            sys::kvc_attention_params_init_sized(
                raw.as_mut_ptr(),
                std::mem::size_of::<sys::kvc_attention_params>(),
            );
            raw.assume_init()
        };
        raw.scale = self.scale;
        raw.sliding_window = self.sliding_window;
        raw.softcap = self.softcap;
        raw
    }
}

/// Which heads a tensor has rows for.
#[derive(Clone, Copy)]
pub(crate) enum Heads {
    Query,
    Kv,
}

/// Checks that `len` floats are `[tokens, heads, head_dim]` of `shape`.
pub(crate) fn check_len(name: &str, len: usize, tokens: usize, heads: Heads, shape: &Shape) -> Result<()> {
    let (heads, which) = match heads {
        Heads::Query => (shape.q_heads, "q_heads"),
        Heads::Kv => (shape.kv_heads, "kv_heads"),
    };
    let expected = tokens * heads as usize * shape.head_dim as usize;
    if len == expected {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{name} holds {len} floats, expected {tokens} tokens x {heads} {which} x {} head_dim = {expected}",
            shape.head_dim
        )))
    }
}

/// A dense host f32 input tensor.
pub(crate) fn input(data: &[f32]) -> sys::kvc_tensor {
    sys::kvc_tensor {
        data: data.as_ptr().cast(),
        dtype: sys::KVC_DTYPE_F32,
        device: sys::KVC_DEVICE_HOST,
        row_stride: 0,
    }
}

/// A dense host f32 output tensor.
pub(crate) fn output(data: &mut [f32]) -> sys::kvc_tensor_mut {
    sys::kvc_tensor_mut {
        data: data.as_mut_ptr().cast(),
        dtype: sys::KVC_DTYPE_F32,
        device: sys::KVC_DEVICE_HOST,
        row_stride: 0,
    }
}
