//! `Error`: a status code and the library's message, taken from a `kvc_status`.
use std::ffi::CStr;
use std::fmt;

use crate::sys;

/// What went wrong: the values of `kvc_status_code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    InvalidArgument,
    OutOfMemory,
    NotFound,
    AlreadyExists,
    Config,
    Plugin,
    Unsupported,
    NoDevice,
    Internal,
    Io,
    /// A code this crate does not know yet (a newer library).
    Other(i32),
}

impl Code {
    fn from_raw(code: sys::kvc_status_code) -> Code {
        match code {
            sys::KVC_ERR_INVALID_ARGUMENT => Code::InvalidArgument,
            sys::KVC_ERR_OUT_OF_MEMORY => Code::OutOfMemory,
            sys::KVC_ERR_NOT_FOUND => Code::NotFound,
            sys::KVC_ERR_ALREADY_EXISTS => Code::AlreadyExists,
            sys::KVC_ERR_CONFIG => Code::Config,
            sys::KVC_ERR_PLUGIN => Code::Plugin,
            sys::KVC_ERR_UNSUPPORTED => Code::Unsupported,
            sys::KVC_ERR_NO_DEVICE => Code::NoDevice,
            sys::KVC_ERR_INTERNAL => Code::Internal,
            sys::KVC_ERR_IO => Code::Io,
            other => Code::Other(other),
        }
    }

    fn raw(self) -> sys::kvc_status_code {
        match self {
            Code::InvalidArgument => sys::KVC_ERR_INVALID_ARGUMENT,
            Code::OutOfMemory => sys::KVC_ERR_OUT_OF_MEMORY,
            Code::NotFound => sys::KVC_ERR_NOT_FOUND,
            Code::AlreadyExists => sys::KVC_ERR_ALREADY_EXISTS,
            Code::Config => sys::KVC_ERR_CONFIG,
            Code::Plugin => sys::KVC_ERR_PLUGIN,
            Code::Unsupported => sys::KVC_ERR_UNSUPPORTED,
            Code::NoDevice => sys::KVC_ERR_NO_DEVICE,
            Code::Internal => sys::KVC_ERR_INTERNAL,
            Code::Io => sys::KVC_ERR_IO,
            Code::Other(other) => other,
        }
    }

    /// The library's name of the code, such as "NOT_FOUND" ("UNKNOWN" for one it lacks).
    pub fn name(self) -> &'static str {
        // SAFETY: static storage, for any value.
        unsafe { CStr::from_ptr(sys::kvc_status_code_name(self.raw())) }.to_str().unwrap_or("")
    }
}

/// A failed call: its code and message. Errors the library reports carry its message as is;
/// errors this crate finds before calling (a wrong slice length, a string with a NUL) are
/// `InvalidArgument` with a message saying what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    code: Code,
    message: String,
}

/// The result of every fallible call.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn new(code: Code, message: String) -> Error {
        Error { code, message }
    }

    pub(crate) fn invalid(message: String) -> Error {
        Error::new(Code::InvalidArgument, message)
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The message, as the library wrote it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

/// Takes ownership of a status returned by a C call: Ok for NULL, else its code and message.
pub(crate) fn check(status: *mut sys::kvc_status) -> Result<()> {
    if status.is_null() {
        return Ok(());
    }
    // SAFETY: a non-NULL status from the library is valid and ours until freed; the message is
    // copied before the free.
    unsafe {
        let code = Code::from_raw(sys::kvc_status_get_code(status));
        let message = CStr::from_ptr(sys::kvc_status_message(status)).to_string_lossy().into_owned();
        sys::kvc_status_free(status);
        Err(Error { code, message })
    }
}
