//! Logger: kvc_context_set_logger with a Rust closure, a panic in it caught, the default back.
mod common;

use std::sync::{Arc, Mutex};

use kvcache::{Batch, CacheParams, Context, DType, Layout, LogLevel};

/// Makes the library log a debug message starting "keeping unused capacity": a contiguous
/// segment shrunk by a truncation finds no room for the smaller copy under the memory limit.
fn log_a_debug_message(context: &Context) {
    const TOKEN_BYTES: usize = 2 * 8 * 4 + 4; // K and V of 8 f32 values, and a position
    let params = CacheParams::new()
        .head_dim(8)
        .dtype(DType::F32)
        .layout(Layout::Contiguous)
        .memory_limit(100 * TOKEN_BYTES + 16);
    let mut cache = context.cache(&params).unwrap();
    cache.create_seq(0).unwrap();
    cache.reserve(0, 100).unwrap();
    let kv = common::values(8, 800);
    cache.append(0, &Batch::new().seq(0, 0..100), &kv, &kv).unwrap();
    cache.truncate(0, 2).unwrap();
}

#[test]
fn the_closure_receives_messages_at_or_above_its_level() {
    let context = common::context();
    let messages = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&messages);
    context.set_logger(LogLevel::Debug, move |level, message| {
        sink.lock().unwrap().push((level, message.to_owned()));
    });
    log_a_debug_message(&context);
    let received = messages.lock().unwrap().clone();
    assert!(
        received
            .iter()
            .any(|(level, message)| *level == LogLevel::Debug
                && message.starts_with("keeping unused capacity")),
        "{received:?}"
    );

    messages.lock().unwrap().clear();
    context.set_logger(LogLevel::Warn, {
        let sink = Arc::clone(&messages);
        move |level, message| sink.lock().unwrap().push((level, message.to_owned()))
    });
    log_a_debug_message(&context);
    assert_eq!(*messages.lock().unwrap(), vec![], "a debug message passed a Warn logger");
}

#[test]
fn a_panic_in_the_closure_does_not_reach_the_library() {
    let context = common::context();
    let calls = Arc::new(Mutex::new(0));
    let counter = Arc::clone(&calls);
    context.set_logger(LogLevel::Debug, move |_, _| {
        *counter.lock().unwrap() += 1;
        panic!("a logger that panics");
    });
    log_a_debug_message(&context);
    log_a_debug_message(&context);
    assert!(*calls.lock().unwrap() >= 2);
    assert!(!context.plugins().unwrap().is_empty(), "the context still works");
}

#[test]
fn the_logger_lives_as_long_as_the_context_and_reset_drops_it() {
    let context = common::context();
    let token = Arc::new(());
    let held = Arc::clone(&token);
    context.set_logger(LogLevel::Debug, move |_, _| {
        let _ = &held;
    });
    let cache = context.cache(&kvcache::CacheParams::new()).unwrap();
    drop(context);
    assert_eq!(Arc::strong_count(&token), 2, "the cache keeps the context and its logger");
    cache.context().reset_logger();
    assert_eq!(Arc::strong_count(&token), 1, "reset_logger dropped the closure");
    drop(cache);
}
