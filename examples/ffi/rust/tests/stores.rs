//! Stores: kvc_seq_offload, kvc_seq_restore, kvc_store_drop, kvc_prefix_save and
//! kvc_prefix_load, through a context with a `host` store ("mem") and a `disk` store ("files").
mod common;

use std::path::PathBuf;

use common::*;
use kvcache::{Attention, Batch, Cache, Code, Context, PluginKind, Prefix};

const STORES: [&str; 2] = ["mem", "files"];
const TOKENS: usize = 20;

/// A context with the two stores, the disk store in a fresh folder named after `test`.
fn context_with_stores(test: &str) -> (Context, PathBuf) {
    let folder = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("stores-{test}"));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).unwrap();
    let yaml = format!(
        "threads: 2\nstores:\n  mem: {{ plugin: host, params: {{ capacity: 64MiB }} }}\n  \
         files: {{ plugin: disk, params: {{ path: '{}' }} }}\n",
        folder.display()
    );
    (Context::new(&yaml).unwrap(), folder)
}

fn new_cache(context: &Context) -> Cache {
    context.cache_from_yaml(Some(&cache_yaml("f16", ""))).unwrap()
}

/// Creates `seq_id` holding positions 0..TOKENS on both layers, as a prefill does.
fn fill(cache: &mut Cache, seq_id: i32) {
    cache.create_seq(seq_id).unwrap();
    let batch = Batch::new().seq(seq_id, 0..TOKENS as i32);
    for layer in 0..2 {
        let k = values(10 + layer as u64, TOKENS * KV_HEADS * HEAD_DIM);
        let v = values(20 + layer as u64, TOKENS * KV_HEADS * HEAD_DIM);
        cache.append(layer, &batch, &k, &v).unwrap();
    }
}

/// The bits of the attention of fixed queries at position 100 over the sequence, both layers.
fn probe(cache: &mut Cache, seq_id: i32) -> Vec<u32> {
    let q = values(99, Q_HEADS * HEAD_DIM);
    let batch = Batch::new().seq(seq_id, [100]);
    let mut bits = Vec::new();
    for layer in 0..2 {
        let mut out = vec![0.0; q.len()];
        cache.attend(layer, &batch, &q, &Attention::default(), &mut out).unwrap();
        bits.extend(out.iter().map(|x| x.to_bits()));
    }
    bits
}

/// Token ids 1000, 1001, ... of the filled sequence's positions.
fn prompt() -> Vec<i32> {
    (1000..1000 + TOKENS as i32).collect()
}

#[test]
fn the_store_plugins_are_listed_as_stores() {
    let (context, folder) = context_with_stores("plugins");
    let plugins = context.plugins().unwrap();
    for name in ["host", "disk"] {
        assert!(plugins.iter().any(|p| p.kind == PluginKind::Store && p.name == name), "{plugins:?}");
    }
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn offload_then_restore_attends_bit_for_bit() {
    let (context, folder) = context_with_stores("offload");
    let mut cache = new_cache(&context);
    for store in STORES {
        fill(&mut cache, 0);
        let before = probe(&mut cache, 0);
        cache.offload(0, store, "seq-0").unwrap();
        assert_eq!(cache.length(0, 0, 0).unwrap_err().code(), Code::NotFound, "{store}");
        let stats = cache.stats().unwrap();
        assert_eq!((stats.sequences, stats.bytes_used), (0, 0), "{store}: the offload freed the sequence");

        cache.restore(5, store, "seq-0").unwrap();
        assert_eq!(probe(&mut cache, 5), before, "{store}");
        // The value stays in the store: it restores again, under another id only.
        assert_eq!(cache.restore(5, store, "seq-0").unwrap_err().code(), Code::AlreadyExists, "{store}");
        cache.restore(6, store, "seq-0").unwrap();
        assert_eq!(probe(&mut cache, 6), before, "{store}");
        cache.remove_seq(5).unwrap();
        cache.remove_seq(6).unwrap();
    }
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn missing_keys_and_unknown_stores_are_not_found() {
    let (context, folder) = context_with_stores("missing");
    let mut cache = new_cache(&context);
    for store in STORES {
        let err = cache.restore(0, store, "never-written").unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{err}");
        assert!(err.message().contains(store), "the message names the store: {err}");
        assert_eq!(cache.stats().unwrap().sequences, 0, "a failed restore creates nothing");
    }
    fill(&mut cache, 0);
    let err = cache.offload(0, "nowhere", "seq-0").unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    assert!(err.message().contains("nowhere"), "{err}");
    assert_eq!(cache.length(0, 1, 1).unwrap(), TOKENS as i32, "a failed offload keeps the sequence");
    assert_eq!(cache.restore(1, "nowhere", "seq-0").unwrap_err().code(), Code::NotFound);
    assert_eq!(context.store_drop("nowhere", "seq-0").unwrap_err().code(), Code::NotFound);
    let prefix = Prefix::new("test-model", prompt());
    assert_eq!(cache.save_prefix(0, "nowhere", &prefix).unwrap_err().code(), Code::NotFound);
    assert_eq!(cache.load_prefix(1, "nowhere", &prefix).unwrap_err().code(), Code::NotFound);
    // What C cannot be given is refused here.
    assert_eq!(cache.offload(0, "mem\0", "seq-0").unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(cache.stats().unwrap().sequences, 1);
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn a_dropped_value_is_gone() {
    let (context, folder) = context_with_stores("drop");
    let mut cache = new_cache(&context);
    for store in STORES {
        fill(&mut cache, 0);
        cache.offload(0, store, "seq-0").unwrap();
        context.store_drop(store, "seq-0").unwrap();
        assert_eq!(context.store_drop(store, "seq-0").unwrap_err().code(), Code::NotFound, "{store}");
        assert_eq!(cache.restore(0, store, "seq-0").unwrap_err().code(), Code::NotFound, "{store}");
    }
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn a_prefix_saved_by_one_cache_loads_into_another() {
    let (context, folder) = context_with_stores("prefix");
    let mut saver = new_cache(&context);
    let mut loader = new_cache(&context);
    fill(&mut saver, 0);
    // The reference: the saver's sequence cut to the two whole chunks of 8 tokens.
    saver.fork(0, 1).unwrap();
    saver.truncate(1, 16).unwrap();
    let expected = probe(&mut saver, 1);
    let prefix = Prefix { chunk_tokens: 8, ..Prefix::new("test-model", prompt()) };
    for (i, store) in STORES.into_iter().enumerate() {
        assert_eq!(saver.save_prefix(0, store, &prefix).unwrap(), 16, "{store}");
        assert_eq!(saver.save_prefix(0, store, &prefix).unwrap(), 16, "{store}: saved again");

        let seq_id = 10 * i as i32;
        assert_eq!(loader.load_prefix(seq_id, store, &prefix).unwrap(), 16, "{store}");
        for (layer, head) in [(0, 0), (1, 1)] {
            assert_eq!(loader.length(seq_id, layer, head).unwrap(), 16, "{store}");
        }
        assert_eq!(probe(&mut loader, seq_id), expected, "{store}");
        let err = loader.load_prefix(seq_id, store, &prefix).unwrap_err();
        assert_eq!(err.code(), Code::AlreadyExists, "{err}");

        // A prompt that differs from token 10 on shares the first chunk only.
        let mut tokens = prompt();
        tokens[10] = 7;
        let diverging = Prefix { token_ids: tokens, ..prefix.clone() };
        assert_eq!(loader.load_prefix(seq_id + 1, store, &diverging).unwrap(), 8, "{store}");
        // Another model's K/V is never restored: the new sequence is empty.
        let other_model = Prefix { model: "other-model".into(), ..prefix.clone() };
        assert_eq!(loader.load_prefix(seq_id + 2, store, &other_model).unwrap(), 0, "{store}");
        assert_eq!(loader.length(seq_id + 2, 0, 0).unwrap(), 0, "{store}");
    }
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn a_prefix_has_the_headers_default_chunk_size() {
    let prefix = Prefix::new("test-model", vec![1, 2, 3]);
    assert_eq!(
        (prefix.model.as_str(), prefix.token_ids.as_slice(), prefix.chunk_tokens),
        ("test-model", &[1, 2, 3][..], 256)
    );
}
