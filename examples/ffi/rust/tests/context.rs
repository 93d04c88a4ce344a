//! Context: kvc_context_create (+ _from_file), kvc_context_load_plugin, plugin count and info.
mod common;

use kvcache::{Code, Context, PluginKind};

#[test]
fn defaults_load_the_cpu_backend_and_the_policies() {
    let context = Context::new("").unwrap();
    let plugins = context.plugins().unwrap();
    assert!(plugins.iter().any(|p| p.kind == PluginKind::Backend && p.name == "cpu"), "{plugins:?}");
    assert!(plugins.iter().any(|p| p.kind == PluginKind::Policy && p.name == "window"), "{plugins:?}");
    assert!(!kvcache::version().is_empty());
}

#[test]
fn bad_yaml_is_a_config_error_with_the_line_and_key() {
    let err = Context::new("threads: 1\ncache: { head_dim: abc }\n").err().unwrap();
    assert_eq!(err.code(), Code::Config);
    assert!(err.message().starts_with("<yaml>:2: cache.head_dim:"), "{err}");
}

#[test]
fn from_file_reads_yaml() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("context.yaml");
    std::fs::write(&path, "threads: 1\ncache: { layers: 3 }\n").unwrap();
    let context = Context::from_file(&path).unwrap();
    assert_eq!(context.cache_from_yaml(None).unwrap().shape().layers, 3);
    let err = Context::from_file(&path.with_extension("missing")).err().unwrap();
    assert!(matches!(err.code(), Code::NotFound | Code::Io), "{err}");
}

#[test]
fn loading_a_missing_plugin_names_the_file() {
    let context = common::context();
    let err = context.load_plugin(std::path::Path::new("/nonexistent/libnothing.so")).unwrap_err();
    assert!(err.message().contains("/nonexistent/libnothing.so"), "{err}");
    // The context still works.
    assert!(!context.plugins().unwrap().is_empty());
}

#[test]
fn a_context_is_shared_across_threads() {
    let context = common::context();
    std::thread::scope(|scope| {
        for layers in 1..=2 {
            let context = &context;
            scope.spawn(move || {
                let params = kvcache::CacheParams { layers, ..Default::default() };
                assert_eq!(context.cache(&params).unwrap().shape().layers, layers);
            });
        }
    });
}
