//! The context's logger as a Rust closure (`kvc_context_set_logger`).
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::context::Context;
use crate::sys;

/// Severity of a log message; as a minimum level, `Off` lets none through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
    Off,
}

impl LogLevel {
    fn raw(self) -> sys::kvc_log_level {
        match self {
            LogLevel::Debug => sys::KVC_LOG_DEBUG,
            LogLevel::Info => sys::KVC_LOG_INFO,
            LogLevel::Warn => sys::KVC_LOG_WARN,
            LogLevel::Error => sys::KVC_LOG_ERROR,
            LogLevel::Off => sys::KVC_LOG_OFF,
        }
    }

    /// A level a newer library adds is reported as `Error`, so that it is not lost.
    fn from_raw(level: sys::kvc_log_level) -> LogLevel {
        match level {
            sys::KVC_LOG_DEBUG => LogLevel::Debug,
            sys::KVC_LOG_INFO => LogLevel::Info,
            sys::KVC_LOG_WARN => LogLevel::Warn,
            _ => LogLevel::Error,
        }
    }
}

type LogFn = dyn Fn(LogLevel, &str) + Send + Sync;

/// A closure boxed twice, so that the library's `user_data` is a thin pointer to it.
pub(crate) struct Logger(Box<Box<LogFn>>);

/// The C callback: calls the closure, catching a panic so that it never unwinds into the
/// library (the default panic hook has already printed it).
unsafe extern "C" fn call_logger(user_data: *mut c_void, level: sys::kvc_log_level, message: *const c_char) {
    // SAFETY: user_data is the Box<LogFn> of a Logger that the context keeps alive until the
    // library can no longer call it; the message is valid during the call.
    let logger = unsafe { &*user_data.cast::<Box<LogFn>>() };
    let message =
        if message.is_null() { "".into() } else { unsafe { CStr::from_ptr(message) }.to_string_lossy() };
    let _ = catch_unwind(AssertUnwindSafe(|| logger(LogLevel::from_raw(level), &message)));
}

impl Context {
    /// Routes the library's messages at or above `min_level` to `logger`, which may be called
    /// from any thread, concurrently. A panic in it is caught (and the message dropped). It must
    /// not set the logger itself, and a clone of this context inside it would keep the context
    /// alive for ever (a cycle). Replaces any logger set before.
    pub fn set_logger(&self, min_level: LogLevel, logger: impl Fn(LogLevel, &str) + Send + Sync + 'static) {
        let logger = Logger(Box::new(Box::new(logger)));
        // The inner box's address: on the heap, it stays put when `logger` moves.
        let user_data = ptr::from_ref::<Box<LogFn>>(&*logger.0).cast_mut().cast();
        self.install(Some(logger), Some(call_logger), user_data, min_level);
    }

    /// Restores the library's default logger: warnings and errors to stderr.
    pub fn reset_logger(&self) {
        self.install(None, None, ptr::null_mut(), LogLevel::Warn);
    }

    fn install(
        &self,
        logger: Option<Logger>,
        callback: sys::kvc_log_fn,
        user_data: *mut c_void,
        min_level: LogLevel,
    ) {
        let mut slot = self.logger_slot().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: a live context; the new logger is kept in the slot for as long as the library
        // may call it; set_logger returns once no thread is inside the previous callback, so the
        // previous logger may then be dropped.
        unsafe { sys::kvc_context_set_logger(self.raw(), callback, user_data, min_level.raw()) };
        *slot = logger;
    }
}
