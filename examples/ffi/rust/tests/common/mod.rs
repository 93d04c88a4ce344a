//! Shared by the test files: a YAML context, deterministic data and a naive attention.
#![allow(dead_code)] // each test file uses a different part

use kvcache::{Batch, Context};

pub const Q_HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 16;

/// A context with the default plugins (cpu backend, built-in policies) and 2 threads.
pub fn context() -> Context {
    Context::new("threads: 2\n").expect("context")
}

/// YAML for a GQA cache (4 query heads over 2 KV heads) of `dtype` with `extra` appended.
pub fn cache_yaml(dtype: &str, extra: &str) -> String {
    format!(
        "cache: {{ layers: 2, kv_heads: {KV_HEADS}, q_heads: {Q_HEADS}, head_dim: {HEAD_DIM}, \
         dtype: {dtype}, memory_limit: 4MiB }}\n{extra}"
    )
}

/// Deterministic values in [-1, 1) (a linear congruential generator).
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Row-major `[tokens, heads, HEAD_DIM]` rows of one sequence, kept as the test appends them.
#[derive(Default, Clone)]
pub struct History {
    pub positions: Vec<i32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

/// The rows of `batch` (q, k and v in batch order) that belong to its `index`-th sequence.
pub fn rows_of<'a>(batch_sizes: &[usize], index: usize, data: &'a [f32], heads: usize) -> &'a [f32] {
    let row = heads * HEAD_DIM;
    let start: usize = batch_sizes[..index].iter().sum();
    &data[start * row..(start + batch_sizes[index]) * row]
}

/// Naive causal GQA attention of `q` (`[n, Q_HEADS, HEAD_DIM]` at `positions`) over the
/// history, scale 1/sqrt(HEAD_DIM).
pub fn naive_attention(q: &[f32], positions: &[i32], history: &History) -> Vec<f32> {
    let group = Q_HEADS / KV_HEADS;
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let mut out = vec![0.0; q.len()];
    for (t, &p) in positions.iter().enumerate() {
        for h in 0..Q_HEADS {
            let g = h / group;
            let query = &q[(t * Q_HEADS + h) * HEAD_DIM..][..HEAD_DIM];
            let seen: Vec<usize> =
                (0..history.positions.len()).filter(|&j| history.positions[j] <= p).collect();
            let logits: Vec<f32> = seen
                .iter()
                .map(|&j| {
                    let key = &history.k[(j * KV_HEADS + g) * HEAD_DIM..][..HEAD_DIM];
                    query.iter().zip(key).map(|(a, b)| a * b).sum::<f32>() * scale
                })
                .collect();
            let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
            let total: f32 = weights.iter().sum();
            let row = &mut out[(t * Q_HEADS + h) * HEAD_DIM..][..HEAD_DIM];
            for (&j, w) in seen.iter().zip(&weights) {
                let value = &history.v[(j * KV_HEADS + g) * HEAD_DIM..][..HEAD_DIM];
                for (o, x) in row.iter_mut().zip(value) {
                    *o += w / total * x;
                }
            }
        }
    }
    out
}

/// Appends `n` tokens of each listed sequence (positions continuing its history) on layer 0
/// with deterministic K/V: the batch, q, k, v, and the histories updated.
pub struct Step {
    pub batch: Batch,
    pub sizes: Vec<usize>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

pub fn step(seed: u64, seqs: &[(i32, usize)], histories: &mut [History]) -> Step {
    let mut batch = Batch::new();
    let total: usize = seqs.iter().map(|s| s.1).sum();
    let q = values(seed, total * Q_HEADS * HEAD_DIM);
    let k = values(seed + 1, total * KV_HEADS * HEAD_DIM);
    let v = values(seed + 2, total * KV_HEADS * HEAD_DIM);
    let sizes: Vec<usize> = seqs.iter().map(|s| s.1).collect();
    for (i, &(seq_id, n)) in seqs.iter().enumerate() {
        let history = &mut histories[i];
        let first = history.positions.last().map_or(0, |p| p + 1);
        let positions: Vec<i32> = (first..first + n as i32).collect();
        history.positions.extend(&positions);
        history.k.extend_from_slice(rows_of(&sizes, i, &k, KV_HEADS));
        history.v.extend_from_slice(rows_of(&sizes, i, &v, KV_HEADS));
        batch = batch.seq(seq_id, positions);
    }
    Step { batch, sizes, q, k, v }
}

/// Largest absolute difference.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
