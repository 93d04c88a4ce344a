//! Compression: kvc_compress with a policy, kvc_cache_policy_info, kvc_report_stats and
//! kvc_cache_estimate_peak_bytes; a policy that does not exist.
mod common;

use common::*;
use kvcache::{Code, Sequences, StatKind};

const WINDOW: &str = "policy: { name: window, budget: 6, sinks: 2, recent: 0 }\n";

#[test]
fn window_keeps_sinks_and_the_newest_tokens() {
    let context = context();
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f16", WINDOW))).unwrap();
    cache.create_seq(0).unwrap();
    cache.create_seq(1).unwrap();
    let mut histories = vec![History::default(); 2];
    let step = step(3, &[(0, 20), (1, 4)], &mut histories);
    cache.append(0, &step.batch, &step.k, &step.v).unwrap();
    cache.compress(None, &[0, 1]).unwrap();
    for head in 0..KV_HEADS as i32 {
        assert_eq!(cache.positions(0, 0, head).unwrap(), [0, 1, 16, 17, 18, 19]);
        assert_eq!(cache.positions(1, 0, head).unwrap(), [0, 1, 2, 3]);
    }
    let info = cache.policy_info().unwrap();
    assert_eq!((info.name.as_str(), info.budget_tokens, info.sinks, info.recent), ("window", 6, 2, 0));
    assert_eq!(cache.stats().unwrap().tokens_evicted, 14 * KV_HEADS as u64);
}

#[test]
fn snapkv_takes_reported_statistics() {
    let context = context();
    let policy = "policy: { name: snapkv, budget: 8, params: { window: 2, kernel: 1 } }\n";
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f32", policy))).unwrap();
    let info = cache.policy_info().unwrap();
    assert_eq!((info.name.as_str(), info.observation_window, info.recent), ("snapkv", 2, 2));
    cache.create_seq(0).unwrap();
    let mut histories = vec![History::default()];
    let step = step(4, &[(0, 16)], &mut histories);
    cache.append(0, &step.batch, &step.k, &step.v).unwrap();
    for head in 0..KV_HEADS as i32 {
        let scores: Vec<f32> = (0..16).map(|i| ((i * 7) % 16) as f32).collect();
        cache.report_stats(0, 0, head, StatKind::AttnWindow, &scores).unwrap();
    }
    cache.compress(Some(0), &[0]).unwrap();
    // Recent 2 (14, 15) plus the six best-scored others: score 7i mod 16 is highest for
    // i = 9 (15), 2 (14), 11 (13), 4 (12), 13 (11), 6 (10).
    assert_eq!(cache.positions(0, 0, 0).unwrap(), [2, 4, 6, 9, 11, 13, 14, 15]);
    assert_eq!(cache.length(0, 1, 0).unwrap(), 0);
    let err = cache.report_stats(0, 0, 0, StatKind::AttnSum, &[0.0; 8]).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[test]
fn a_policy_keeps_the_estimate_down() {
    let context = context();
    let full = context.cache_from_yaml(Some(&cache_yaml("f16", ""))).unwrap();
    let windowed = context
        .cache_from_yaml(Some(
            &cache_yaml("f16", WINDOW)
                .replace("recent: 0 }", "recent: 0, compress: { prefill: per_chunk } }"),
        ))
        .unwrap();
    let full_bytes = full.estimate_peak_bytes(512, 64, 16).unwrap();
    let windowed_bytes = windowed.estimate_peak_bytes(512, 64, 16).unwrap();
    assert!(windowed_bytes < full_bytes, "{windowed_bytes} >= {full_bytes}");
}

#[test]
fn unknown_policy_is_an_error_naming_it() {
    let context = context();
    let err = context
        .cache_from_yaml(Some(&cache_yaml("f16", "policy: { name: no_such_policy }\n")))
        .err()
        .unwrap();
    assert!(matches!(err.code(), Code::NotFound | Code::Plugin | Code::Config), "{err}");
    assert!(err.message().contains("no_such_policy"), "{err}");
    let mut cache = context.cache_from_yaml(Some(&cache_yaml("f16", ""))).unwrap();
    assert_eq!(cache.policy_info().unwrap_err().code(), Code::NotFound);
    cache.create_seq(0).unwrap();
    // Without a policy compress does nothing.
    cache.compress(None, &[0]).unwrap();
}
