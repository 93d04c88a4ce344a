//! The prefix cache: kvc_prefix_publish, kvc_prefix_lookup and kvc_prefix_attach, the cache
//! params that turn it on (prefix_cache, prefix_store, prefix_write_through) and its stats.
mod common;

use common::*;
use kvcache::{Attention, Batch, Cache, CacheParams, Code, Context, DType, Layout, Prefix};

const TOKENS: i32 = 10;

/// A paged f32 cache of the common shape, blocks of 4 tokens.
fn params() -> CacheParams {
    CacheParams::new()
        .layers(2)
        .kv_heads(KV_HEADS as i32)
        .q_heads(Q_HEADS as i32)
        .head_dim(HEAD_DIM as i32)
        .dtype(DType::F32)
        .layout(Layout::Paged)
        .block_tokens(4)
}

/// Creates `seq_id` holding positions 0..tokens on both layers, the same K/V for every
/// sequence (a prefix of it for fewer tokens).
fn fill(cache: &mut Cache, seq_id: i32, tokens: i32) {
    cache.create_seq(seq_id).unwrap();
    let batch = Batch::new().seq(seq_id, 0..tokens);
    let row = KV_HEADS * HEAD_DIM;
    for layer in 0..2 {
        let k = values(10 + layer as u64, TOKENS as usize * row);
        let v = values(20 + layer as u64, TOKENS as usize * row);
        let n = tokens as usize * row;
        cache.append(layer, &batch, &k[..n], &v[..n]).unwrap();
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

/// Token ids of the filled positions.
fn prompt() -> Vec<i32> {
    (1000..1000 + TOKENS).collect()
}

#[test]
fn a_published_prompt_is_found_and_attached_by_whole_blocks() {
    let context = context();
    let mut cache = context.cache(&params().prefix_cache(true)).unwrap();
    fill(&mut cache, 0, TOKENS);
    let prefix = Prefix::new("test-model", prompt());
    // 10 tokens fill two blocks of 4: 8 are published and found.
    assert_eq!(cache.publish_prefix(0, &prefix).unwrap(), 8);
    assert_eq!(cache.lookup_prefix(&prefix).unwrap(), 8);
    let mut diverging = prompt();
    diverging[5] = 7;
    assert_eq!(cache.lookup_prefix(&Prefix { token_ids: diverging, ..prefix.clone() }).unwrap(), 4);

    assert_eq!(cache.attach_prefix(1, &prefix).unwrap(), 8);
    for layer in 0..2 {
        for head in 0..KV_HEADS as i32 {
            assert_eq!(cache.length(1, layer, head).unwrap(), 8, "layer {layer} head {head}");
            assert_eq!(cache.positions(1, layer, head).unwrap(), (0..8).collect::<Vec<_>>());
        }
    }
    assert!(cache.stats().unwrap().bytes_shared > 0);
    // The attached K/V is sequence 0's first 8 rows: attention over it is, to the bit, that over
    // a sequence given only those rows.
    fill(&mut cache, 2, 8);
    assert_eq!(probe(&mut cache, 1), probe(&mut cache, 2));

    // The published blocks outlive the sequences that held them.
    for seq_id in 0..3 {
        cache.remove_seq(seq_id).unwrap();
    }
    let stats = cache.stats().unwrap();
    assert!(stats.bytes_cached > 0);
    assert_eq!(stats.bytes_cached, stats.bytes_used);
    assert_eq!((stats.prefix_hits, stats.prefix_tokens_reused), (1, 8));
    assert_eq!(cache.lookup_prefix(&prefix).unwrap(), 8);
}

#[test]
fn a_write_through_store_carries_the_blocks_to_another_cache() {
    let context =
        Context::new("threads: 2\nstores:\n  mem: { plugin: host, params: { capacity: 64MiB } }\n").unwrap();
    let writer_params = params().prefix_cache(true).prefix_store("mem").prefix_write_through(true);
    let mut writer = context.cache(&writer_params).unwrap();
    let mut reader = context.cache(&params().prefix_cache(true).prefix_store("mem")).unwrap();
    fill(&mut writer, 0, TOKENS);
    let prefix = Prefix::new("test-model", prompt());
    assert_eq!(writer.publish_prefix(0, &prefix).unwrap(), 8);
    // The reader's own cache holds nothing; its attach continues in the store.
    assert_eq!(reader.lookup_prefix(&prefix).unwrap(), 0);
    assert_eq!(reader.attach_prefix(0, &prefix).unwrap(), 8);
    fill(&mut writer, 1, 8);
    assert_eq!(probe(&mut reader, 0), probe(&mut writer, 1));
    // What the attach loaded, it published.
    assert_eq!(reader.lookup_prefix(&prefix).unwrap(), 8);
}

#[test]
fn attach_needs_a_prefix_cache_and_a_new_sequence_id() {
    let context = context();
    let prefix = Prefix::new("test-model", prompt());
    let mut plain = context.cache(&params()).unwrap();
    fill(&mut plain, 0, TOKENS);
    let err = plain.attach_prefix(1, &prefix).unwrap_err();
    assert_eq!(err.code(), Code::Unsupported, "{err}");
    assert_eq!(plain.length(1, 0, 0).unwrap_err().code(), Code::NotFound);
    let err = plain.publish_prefix(0, &prefix).unwrap_err();
    assert_eq!(err.code(), Code::Unsupported, "{err}");
    let err = context.cache(&params().prefix_cache(true).prefix_store("m\0em")).err().unwrap();
    assert_eq!((err.code(), err.message()), (Code::InvalidArgument, "prefix_store contains a NUL byte"));

    let mut cache = context.cache(&params().prefix_cache(true)).unwrap();
    fill(&mut cache, 0, TOKENS);
    assert_eq!(cache.publish_prefix(0, &prefix).unwrap(), 8);
    let err = cache.attach_prefix(0, &prefix).unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err}");
    assert_eq!(cache.length(0, 1, 1).unwrap(), TOKENS);
    assert_eq!(cache.stats().unwrap().prefix_hits, 0);
}
