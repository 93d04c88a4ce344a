//! Strings handed to C: UTF-8 without NUL, and strings read back from it.
use std::ffi::{c_char, CStr, CString};
use std::path::Path;

use crate::error::{Error, Result};

/// `text` as a C string; a NUL inside is an `InvalidArgument` error naming `what`.
pub(crate) fn c_string(what: &str, text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::invalid(format!("{what} contains a NUL byte")))
}

/// A path as the UTF-8 C string the API expects.
pub(crate) fn c_path(path: &Path) -> Result<CString> {
    let text =
        path.to_str().ok_or_else(|| Error::invalid(format!("path {} is not UTF-8", path.display())))?;
    c_string("path", text)
}

/// Copies a C string owned by the library ("" for NULL).
///
/// # Safety
/// `text` is NULL or a valid NUL-terminated string.
pub(crate) unsafe fn owned(text: *const c_char) -> String {
    if text.is_null() {
        String::new()
    } else {
        CStr::from_ptr(text).to_string_lossy().into_owned()
    }
}
