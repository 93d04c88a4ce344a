//! Stats: kvc_cache_get_stats across appends, forks, compression and removal.
mod common;

use common::*;

#[test]
fn counters_follow_the_cache() {
    let context = context();
    let policy = "policy: { name: window, budget: 4, sinks: 0, recent: 0 }\n";
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f16", policy))).unwrap();
    let empty = cache.stats().unwrap();
    assert_eq!((empty.bytes_used, empty.tokens_stored, empty.sequences), (0, 0, 0));
    assert_eq!(empty.bytes_limit, 4 << 20);

    cache.create_seq(0).unwrap();
    let mut histories = vec![History::default()];
    let step = step(8, &[(0, 40)], &mut histories);
    cache.append(0, &step.batch, &step.k, &step.v).unwrap();
    let full = cache.stats().unwrap();
    assert_eq!((full.tokens_stored, full.sequences), (40 * KV_HEADS as u64, 1));
    assert!(full.bytes_used > 0 && full.blocks_used > 0 && full.bytes_peak >= full.bytes_used);

    cache.compress(None, &[0]).unwrap();
    let compressed = cache.stats().unwrap();
    assert_eq!(compressed.tokens_stored, 4 * KV_HEADS as u64);
    assert_eq!(compressed.tokens_evicted, 36 * KV_HEADS as u64);
    assert!(compressed.bytes_used < full.bytes_used);
    assert_eq!(compressed.bytes_peak, full.bytes_peak);

    cache.remove_seq(0).unwrap();
    let removed = cache.stats().unwrap();
    assert_eq!((removed.bytes_used, removed.sequences), (0, 0));
}
