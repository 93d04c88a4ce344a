//! Data path: kvc_append, kvc_attend, kvc_append_attend against a naive attention.
mod common;

use common::*;
use kvcache::{Attention, Code};

/// Prefill 5 and 3 tokens of two sequences, then two decode steps, comparing every output.
fn prefill_and_decode(dtype: &str, tolerance: f32) {
    let context = context();
    let mut cache = context.cache_from_yaml(Some(&cache_yaml(dtype, ""))).unwrap();
    cache.create_seq(0).unwrap();
    cache.create_seq(7).unwrap();
    let mut histories = vec![History::default(); 2];
    for (seed, sizes) in [(10, [5, 3]), (20, [1, 1]), (30, [1, 1])] {
        let step = step(seed, &[(0, sizes[0]), (7, sizes[1])], &mut histories);
        let mut out = vec![0.0; step.q.len()];
        cache
            .append_attend(0, &step.batch, &step.q, &step.k, &step.v, &Attention::default(), &mut out)
            .unwrap();
        for (i, history) in histories.iter().enumerate() {
            let n = step.sizes[i];
            let positions = &history.positions[history.positions.len() - n..];
            let expected = naive_attention(rows_of(&step.sizes, i, &step.q, Q_HEADS), positions, history);
            let diff = max_diff(rows_of(&step.sizes, i, &out, Q_HEADS), &expected);
            assert!(diff <= tolerance, "{dtype}: sequence {i} differs by {diff}");
        }
    }
    assert_eq!(cache.length(0, 0, 1).unwrap(), 7);
    assert_eq!(cache.length(7, 0, 0).unwrap(), 5);
}

#[test]
fn attention_matches_naive_f32() {
    prefill_and_decode("f32", 1e-5);
}

#[test]
fn attention_matches_naive_f16() {
    prefill_and_decode("f16", 1e-2);
}

#[test]
fn separate_append_and_attend_match_append_attend() {
    let context = context();
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f32", ""))).unwrap();
    cache.create_seq(0).unwrap();
    let mut histories = vec![History::default()];
    let step = step(1, &[(0, 4)], &mut histories);
    cache.append(1, &step.batch, &step.k, &step.v).unwrap();
    let mut out = vec![0.0; step.q.len()];
    cache.attend(1, &step.batch, &step.q, &Attention::default(), &mut out).unwrap();
    let expected = naive_attention(&step.q, &histories[0].positions, &histories[0]);
    assert!(max_diff(&out, &expected) <= 1e-5);
}

#[test]
fn wrong_shape_is_an_error_and_the_cache_stays_usable() {
    let context = context();
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f32", ""))).unwrap();
    cache.create_seq(0).unwrap();
    let mut histories = vec![History::default()];
    let step = step(1, &[(0, 2)], &mut histories);
    let err = cache.append(0, &step.batch, &step.k[1..], &step.v).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("k holds 63 floats, expected 2 tokens x 2 kv_heads x 16 head_dim = 64"),
        "{err}"
    );
    // The library's own check: layer 5 of a 2-layer cache.
    let err = cache.append(5, &step.batch, &step.k, &step.v).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("layer"), "{err}");
    assert_eq!(cache.length(0, 0, 0).unwrap(), 0);
    cache.append(0, &step.batch, &step.k, &step.v).unwrap();
    assert_eq!(cache.length(0, 0, 0).unwrap(), 2);
}

#[test]
fn past_the_memory_limit_nothing_is_stored() {
    let context = context();
    let yaml = cache_yaml("f32", "").replace("memory_limit: 4MiB", "memory_limit: 64KiB");
    let mut cache = context.cache_from_yaml(Some(&yaml)).unwrap();
    cache.create_seq(0).unwrap();
    let mut histories = vec![History::default()];
    let big = step(1, &[(0, 1024)], &mut histories);
    let err = cache.append(0, &big.batch, &big.k, &big.v).unwrap_err();
    assert_eq!(err.code(), Code::OutOfMemory);
    assert!(!err.message().is_empty());
    assert_eq!(cache.length(0, 0, 0).unwrap(), 0);
    let mut histories = vec![History::default()];
    let small = step(2, &[(0, 8)], &mut histories);
    cache.append(0, &small.batch, &small.k, &small.v).unwrap();
    assert_eq!(cache.length(0, 0, 0).unwrap(), 8);
}

#[test]
fn shards_run_on_their_own_threads() {
    let context = context();
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f32", ""))).unwrap();
    cache.create_seq(0).unwrap();
    cache.create_seq(1).unwrap();
    let shards = cache.split(&[&[0], &[1]]).unwrap();
    std::thread::scope(|scope| {
        for mut shard in shards {
            scope.spawn(move || {
                let seq_id = shard.seq_ids()[0];
                let mut histories = vec![History::default()];
                let step = step(100 + seq_id as u64, &[(seq_id, 6)], &mut histories);
                let mut out = vec![0.0; step.q.len()];
                shard
                    .append_attend(0, &step.batch, &step.q, &step.k, &step.v, &Attention::default(), &mut out)
                    .unwrap();
                let expected = naive_attention(&step.q, &histories[0].positions, &histories[0]);
                assert!(max_diff(&out, &expected) <= 1e-5);
                let err = shard.length(1 - seq_id, 0, 0).unwrap_err();
                assert!(err.message().contains("not in this shard"), "{err}");
            });
        }
    });
    assert_eq!(cache.length(1, 0, 0).unwrap(), 6);
}

#[test]
fn overlapping_shards_are_refused() {
    let context = context();
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f32", ""))).unwrap();
    let err = cache.split(&[&[0, 1], &[1]]).err().unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[test]
fn rotated_keys_attend_as_the_unrotated_and_export_only_to_rotated_caches() {
    use kvcache::{CacheParams, DType, Rotation};
    let context = context();
    let params = CacheParams::new()
        .kv_heads(KV_HEADS as i32)
        .q_heads(Q_HEADS as i32)
        .head_dim(HEAD_DIM as i32)
        .dtype(DType::F32)
        .k_rotation(Rotation::Hadamard);
    let mut cache = context.cache(&params).unwrap();
    cache.create_seq(0).unwrap();
    let mut histories = vec![History::default()];
    for (seed, n) in [(40, 6), (50, 1)] {
        let step = step(seed, &[(0, n)], &mut histories);
        let mut out = vec![0.0; step.q.len()];
        cache
            .append_attend(0, &step.batch, &step.q, &step.k, &step.v, &Attention::default(), &mut out)
            .unwrap();
        let positions = &histories[0].positions[histories[0].positions.len() - n..];
        let expected = naive_attention(&step.q, positions, &histories[0]);
        let diff = max_diff(&out, &expected);
        assert!(diff <= 1e-5, "rotated keys: differs by {diff}");
    }
    let image = cache.export(0).unwrap();
    assert_eq!(u32::from_le_bytes(image[8..12].try_into().unwrap()), 4, "image version");
    let mut plain = context.cache(&params.clone().k_rotation(Rotation::None)).unwrap();
    let err = plain.import(0, &image).err().unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("k_rotation hadamard"), "{err}");
    let mut rotated = context.cache(&params).unwrap();
    rotated.import(0, &image).unwrap();
    assert_eq!(rotated.export(0).unwrap(), image);
}
