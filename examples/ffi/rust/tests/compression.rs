//! Compression: kvc_compress with a policy, kvc_cache_policy_info, kvc_report_stats,
//! kvc_cache_estimate_peak_bytes and kvc_cache_estimate; prefill `once` with the prompt's last
//! chunk marked (kvc_batch::prompt_end); a policy that does not exist.
mod common;

use common::*;
use kvcache::{Batch, Cache, Code, EstimateRequest, StatKind};

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

/// append_attend of `batch` on `layer` with q, k, v drawn from `seed`.
fn attend(cache: &mut Cache, layer: i32, batch: &Batch, seed: u64) {
    let n = batch.tokens();
    let q = values(seed, n * Q_HEADS * HEAD_DIM);
    let k = values(seed + 1, n * KV_HEADS * HEAD_DIM);
    let v = values(seed + 2, n * KV_HEADS * HEAD_DIM);
    let mut out = vec![0.0; q.len()];
    cache.append_attend(layer, batch, &q, &k, &v, &Default::default(), &mut out).unwrap();
}

#[test]
fn once_with_a_marked_last_prompt_chunk_compresses_each_layer_right_after_it() {
    let context = context();
    let tova = "policy: { name: tova, budget: 12, compress: { prefill: once } }\n";
    let mut marked = context.cache_from_yaml(Some(&cache_yaml("f32", tova))).unwrap();
    let mut unmarked = context.cache_from_yaml(Some(&cache_yaml("f32", tova))).unwrap();
    marked.create_seq(0).unwrap();
    unmarked.create_seq(0).unwrap();
    let layers = 2;
    for layer in 0..layers {
        let first = Batch::new().seq(0, 0..20);
        attend(&mut marked, layer, &first, 10 * layer as u64);
        attend(&mut unmarked, layer, &first, 10 * layer as u64);
    }
    for layer in 0..layers {
        let seed = 100 + 10 * layer as u64;
        attend(&mut marked, layer, &Batch::new().prompt_end(0, 20..40), seed);
        attend(&mut unmarked, layer, &Batch::new().seq(0, 20..40), seed);
        for head in 0..KV_HEADS as i32 {
            assert_eq!(marked.length(0, layer, head).unwrap(), 12, "layer {layer}: compressed at once");
            assert_eq!(unmarked.length(0, layer, head).unwrap(), 40, "layer {layer}");
            if layer + 1 < layers {
                assert_eq!(
                    marked.length(0, layer + 1, head).unwrap(),
                    20,
                    "the next layer waits for its chunk"
                );
            }
        }
    }
    // The unmarked cache compresses the same statistics at the first decode token, so both keep
    // the same tokens; the marked one does not compress again.
    for layer in 0..layers {
        let decode = Batch::new().seq(0, [40]);
        attend(&mut marked, layer, &decode, 200 + 10 * layer as u64);
        attend(&mut unmarked, layer, &decode, 200 + 10 * layer as u64);
    }
    for layer in 0..layers {
        for head in 0..KV_HEADS as i32 {
            let kept = marked.positions(0, layer, head).unwrap();
            assert_eq!(kept.len(), 13);
            assert_eq!(kept, unmarked.positions(0, layer, head).unwrap(), "layer {layer} head {head}");
        }
    }
}

#[test]
fn the_estimate_follows_a_marked_whole_prompt_prefill() {
    const PROMPT: i32 = 2048;
    const BUDGET: usize = 512;
    let context = context();
    let knorm = "policy: { name: knorm, budget: 512, compress: { prefill: once } }\n";
    let yaml = cache_yaml("f16", knorm).replace("dtype: f16", "dtype: f16, layout: paged, block_tokens: 16");
    let cache = context.cache_from_yaml(Some(&yaml)).unwrap();
    let layers = cache.shape().layers as usize;
    let mut request = EstimateRequest {
        prompt_tokens: PROMPT,
        chunk_tokens: PROMPT,
        new_tokens: 4,
        marks_prompt_end: false,
    };
    let unmarked = cache.estimate(&request).unwrap();
    assert_eq!(unmarked, cache.estimate_peak_bytes(PROMPT, PROMPT, 4).unwrap());
    request.marks_prompt_end = true;
    let marked = cache.estimate(&request).unwrap();
    // f16 K and V plus an int32 position per token; one layer holds the whole prompt while the
    // others hold their budget.
    let token_bytes = 2 * HEAD_DIM * 2 + 4;
    assert_eq!(marked, (PROMPT as usize + (layers - 1) * BUDGET) * token_bytes * KV_HEADS);
    assert_eq!(unmarked, layers * PROMPT as usize * token_bytes * KV_HEADS);

    let err = cache.estimate(&EstimateRequest { chunk_tokens: 0, ..request }).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("chunk_tokens"), "{err}");
}
