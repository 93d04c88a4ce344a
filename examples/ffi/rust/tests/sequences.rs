//! Sequences: create, remove, reserve, fork, truncate, remove_range, export, import (bytes
//! and files), length and view.
mod common;

use common::*;
use kvcache::{Attention, Cache, Code};

/// A cache with sequence 0 holding 20 tokens (positions 0..20) on layer 0.
fn filled(context: &kvcache::Context) -> (Cache, History) {
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f32", ""))).unwrap();
    cache.create_seq(0).unwrap();
    let mut histories = vec![History::default()];
    let step = step(5, &[(0, 20)], &mut histories);
    cache.append(0, &step.batch, &step.k, &step.v).unwrap();
    (cache, histories.remove(0))
}

/// Attention of one fixed query at position 100 over sequence `seq_id`, layer 0.
fn probe(cache: &mut Cache, seq_id: i32) -> Vec<f32> {
    let q = values(99, Q_HEADS * HEAD_DIM);
    let mut out = vec![0.0; q.len()];
    let batch = kvcache::Batch::new().seq(seq_id, [100]);
    cache.attend(0, &batch, &q, &Attention::default(), &mut out).unwrap();
    out
}

#[test]
fn a_stream_reaches_the_backend_which_the_cpu_one_ignores() {
    let context = context();
    let (mut with_stream, _) = filled(&context);
    let (mut without, _) = filled(&context);
    // Stands for an engine's stream.
    let mut engine_stream = 0u8;
    // SAFETY: the CPU backend never reads the stream; it outlives the cache.
    unsafe { with_stream.set_stream((&mut engine_stream as *mut u8).cast()) }.unwrap();
    for cache in [&mut with_stream, &mut without] {
        cache.fork(0, 1).unwrap();
        cache.truncate(1, 12).unwrap();
    }
    assert_eq!(probe(&mut with_stream, 1), probe(&mut without, 1));
    // SAFETY: null is the backend's default stream.
    unsafe { with_stream.set_stream(std::ptr::null_mut()) }.unwrap();
    assert_eq!(probe(&mut with_stream, 0), probe(&mut without, 0));
}

#[test]
fn create_and_remove() {
    let context = context();
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f32", ""))).unwrap();
    cache.create_seq(3).unwrap();
    let err = cache.create_seq(3).unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert!(err.message().contains('3'), "{err}");
    cache.remove_seq(3).unwrap();
    assert_eq!(cache.remove_seq(3).unwrap_err().code(), Code::NotFound);
    assert_eq!(cache.length(3, 0, 0).unwrap_err().code(), Code::NotFound);
}

#[test]
fn reserve_past_the_limit_fails_and_changes_nothing() {
    let context = context();
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f32", ""))).unwrap();
    cache.create_seq(0).unwrap();
    cache.reserve(0, 16).unwrap();
    let before = cache.stats().unwrap();
    assert_eq!(cache.reserve(0, 1 << 20).unwrap_err().code(), Code::OutOfMemory);
    assert_eq!(cache.stats().unwrap().bytes_used, before.bytes_used);
}

#[test]
fn fork_shares_blocks_and_matches_the_source() {
    let context = context();
    let (mut cache, _) = filled(&context);
    cache.fork(0, 1).unwrap();
    assert!(cache.stats().unwrap().bytes_shared > 0);
    assert_eq!(cache.positions(1, 0, 0).unwrap(), cache.positions(0, 0, 0).unwrap());
    assert_eq!(probe(&mut cache, 1), probe(&mut cache, 0));
    assert_eq!(cache.fork(0, 1).unwrap_err().code(), Code::AlreadyExists);
}

#[test]
fn truncate_and_remove_range_drop_positions() {
    let context = context();
    let (mut cache, history) = filled(&context);
    cache.truncate(0, 15).unwrap();
    assert_eq!(cache.positions(0, 0, 1).unwrap(), (0..15).collect::<Vec<_>>());
    cache.remove_range(0, 3..6).unwrap();
    let expected: Vec<i32> = (0..3).chain(6..15).collect();
    assert_eq!(cache.positions(0, 0, 0).unwrap(), expected);
    // The attention sees exactly the tokens left.
    let keep: Vec<usize> = expected.iter().map(|&p| p as usize).collect();
    let row = KV_HEADS * HEAD_DIM;
    let left = History {
        positions: expected.clone(),
        k: keep.iter().flat_map(|&j| history.k[j * row..(j + 1) * row].to_vec()).collect(),
        v: keep.iter().flat_map(|&j| history.v[j * row..(j + 1) * row].to_vec()).collect(),
    };
    let q = values(99, Q_HEADS * HEAD_DIM);
    assert!(max_diff(&probe(&mut cache, 0), &naive_attention(&q, &[100], &left)) <= 1e-5);
}

#[test]
fn export_and_import_round_trip() {
    let context = context();
    let (mut cache, _) = filled(&context);
    let bytes = cache.export(0).unwrap();
    assert!(!bytes.is_empty());
    cache.import(9, &bytes).unwrap();
    assert_eq!(probe(&mut cache, 9), probe(&mut cache, 0));
    let mut other =
        context.cache_from_yaml(Some(&cache_yaml("f32", "").replace("paged", "contiguous"))).unwrap();
    other.import(0, &bytes).unwrap();
    assert_eq!(probe(&mut other, 0), probe(&mut cache, 0));
}

#[test]
fn bad_bytes_are_refused_and_create_nothing() {
    let context = context();
    let (mut cache, _) = filled(&context);
    let mut bytes = cache.export(0).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    let err = cache.import(1, &bytes).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(!err.message().is_empty());
    assert_eq!(cache.length(1, 0, 0).unwrap_err().code(), Code::NotFound);
    assert_eq!(cache.stats().unwrap().sequences, 1);
}

#[test]
fn export_and_import_through_a_file() {
    let context = context();
    let (mut cache, _) = filled(&context);
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sequences-seq0.kvcseq");
    cache.export_file(0, &path).unwrap();
    cache.import_file(4, &path).unwrap();
    assert_eq!(probe(&mut cache, 4), probe(&mut cache, 0));
    let missing = path.with_extension("missing");
    assert_eq!(cache.import_file(5, &missing).unwrap_err().code(), Code::NotFound);
    std::fs::remove_file(&path).unwrap();
}
