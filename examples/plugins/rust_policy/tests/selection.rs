//! Loads the plugin from YAML and checks what it keeps against the rule, computed here.
use std::path::PathBuf;

use kvcache::{Batch, Code, Context};

/// The plugin cargo built next to this test executable (target/<profile>/deps).
fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("libkvc_policy_rust_cycle.so")
}

fn yaml(budget: i32, params: &str) -> String {
    format!(
        "plugins: {{ paths: ['{}'] }}\n\
         cache: {{ layers: 2, kv_heads: 2, head_dim: 8, dtype: f32 }}\n\
         policy: {{ name: rust_cycle, budget: {budget}, sinks: 0, recent: 0, params: {{ {params} }} }}\n",
        plugin_path().display().to_string().replace('\'', "''")
    )
}

/// The positions the rule keeps: the `budget` largest |p mod period - period/2|, newer first
/// among equals, in position order.
fn expected(positions: &[i32], budget: usize, period: i32) -> Vec<i32> {
    let mut ranked = positions.to_vec();
    ranked.sort_by_key(|&p| std::cmp::Reverse(((p % period - period / 2).abs(), p)));
    ranked.truncate(budget);
    ranked.sort();
    ranked
}

#[test]
fn keeps_what_the_rule_selects() {
    let context = Context::new(&yaml(9, "period: 7")).unwrap();
    let info = context.plugins().unwrap().into_iter().find(|p| p.name == "rust_cycle").unwrap();
    assert_eq!(PathBuf::from(&info.path), plugin_path());
    let mut cache = context.cache_from_yaml(None).unwrap();
    let sequences: [(i32, Vec<i32>); 2] = [(0, (0..40).collect()), (5, (100..127).collect())];
    let mut batch = Batch::new();
    for (seq_id, positions) in &sequences {
        cache.create_seq(*seq_id).unwrap();
        batch = batch.seq(*seq_id, positions.iter().copied());
    }
    let rows = batch.tokens() * 2 * 8;
    let k: Vec<f32> = (0..rows).map(|i| (i % 13) as f32 * 0.1).collect();
    for layer in 0..2 {
        cache.append(layer, &batch, &k, &k).unwrap();
    }
    cache.compress(None, &[0, 5]).unwrap();
    for (seq_id, positions) in &sequences {
        for (layer, head) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            assert_eq!(
                cache.positions(*seq_id, layer, head).unwrap(),
                expected(positions, 9, 7),
                "seq {seq_id}"
            );
        }
    }
    let info = cache.policy_info().unwrap();
    assert_eq!((info.name.as_str(), info.sinks, info.recent, info.stats), ("rust_cycle", 0, 0, 0));
}

#[test]
fn another_period() {
    let context = Context::new(&yaml(5, "period: 4")).unwrap();
    let mut cache = context.cache_from_yaml(None).unwrap();
    cache.create_seq(0).unwrap();
    let batch = Batch::new().seq(0, 0..12);
    let k = vec![0.5; 12 * 2 * 8];
    cache.append(0, &batch, &k, &k).unwrap();
    cache.compress(Some(0), &[0]).unwrap();
    let positions: Vec<i32> = (0..12).collect();
    assert_eq!(cache.positions(0, 0, 1).unwrap(), expected(&positions, 5, 4));
}

#[test]
fn bad_parameters_are_config_errors_with_the_plugin_message() {
    let context = Context::new(&yaml(4, "colour: red")).unwrap();
    let err = context.cache_from_yaml(None).err().unwrap();
    assert_eq!(err.code(), Code::Config, "{err}");
    assert!(err.message().contains("policy.params.colour: unknown parameter for rust_cycle"), "{err}");
    let context = Context::new(&yaml(4, "period: 99")).unwrap();
    let err = context.cache_from_yaml(None).err().unwrap();
    assert!(err.message().contains("expected an integer in 2..16, got '99'"), "{err}");
}
