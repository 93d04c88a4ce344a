//! The hand-written structs of `sys` have the size the library was compiled with: each
//! `*_init` function stores the C `sizeof` in `struct_size`.
use std::mem::{size_of, MaybeUninit};

use kvcache::sys;

macro_rules! init_size {
    ($ty:ty, $init:expr) => {{
        let mut value = MaybeUninit::<$ty>::zeroed();
        // SAFETY: the init function writes a struct of this type.
        unsafe { $init(value.as_mut_ptr()) };
        unsafe { value.assume_init() }.struct_size as usize
    }};
}

#[test]
fn struct_sizes_match_the_library() {
    assert_eq!(
        init_size!(sys::kvc_cache_params, sys::kvc_cache_params_init),
        size_of::<sys::kvc_cache_params>()
    );
    assert_eq!(
        init_size!(sys::kvc_cache_stats, sys::kvc_cache_stats_init),
        size_of::<sys::kvc_cache_stats>()
    );
    assert_eq!(
        init_size!(sys::kvc_policy_info, sys::kvc_policy_info_init),
        size_of::<sys::kvc_policy_info>()
    );
    assert_eq!(
        init_size!(sys::kvc_attention_params, sys::kvc_attention_params_init),
        size_of::<sys::kvc_attention_params>()
    );
    let mut request = MaybeUninit::<sys::kvc_estimate_request>::zeroed();
    // SAFETY: kvc_estimate_request_init writes a struct of this type.
    unsafe { sys::kvc_estimate_request_init(request.as_mut_ptr(), 0, 0, 0) };
    let request = unsafe { request.assume_init() };
    assert_eq!(request.struct_size as usize, size_of::<sys::kvc_estimate_request>());
    assert_eq!(request.marks_prompt_end, 0);
    let mut batch = MaybeUninit::<sys::kvc_batch>::zeroed();
    // SAFETY: kvc_batch_init only stores the pointers.
    unsafe {
        sys::kvc_batch_init(batch.as_mut_ptr(), 0, std::ptr::null(), std::ptr::null(), std::ptr::null())
    };
    let batch = unsafe { batch.assume_init() };
    assert_eq!(batch.struct_size as usize, size_of::<sys::kvc_batch>());
    assert!(batch.prompt_end.is_null());
    let mut prefix = MaybeUninit::<sys::kvc_prefix>::zeroed();
    // SAFETY: kvc_prefix_init only stores the pointers.
    unsafe { sys::kvc_prefix_init(prefix.as_mut_ptr(), std::ptr::null(), std::ptr::null(), 0) };
    assert_eq!(unsafe { prefix.assume_init() }.struct_size as usize, size_of::<sys::kvc_prefix>());
}

#[test]
fn version_and_names_agree() {
    // SAFETY: plain calls returning static strings.
    unsafe {
        let number = sys::kvc_version();
        let text = std::ffi::CStr::from_ptr(sys::kvc_version_string()).to_str().unwrap();
        let expected = format!("{}.{}.{}", number / 10000, number / 100 % 100, number % 100);
        assert_eq!(text, expected);
        assert_eq!(
            std::ffi::CStr::from_ptr(sys::kvc_status_code_name(sys::KVC_ERR_OUT_OF_MEMORY)).to_bytes(),
            b"OUT_OF_MEMORY"
        );
        assert_eq!(sys::kvc_dtype_size(sys::KVC_DTYPE_F16), 2);
    }
}

#[test]
fn formats_come_from_the_library_table() {
    let f16 = kvcache::DType::F16.describe().unwrap();
    assert_eq!(f16, kvcache::FormatInfo { name: "f16".into(), group_size: 1, group_bytes: 2 });
    assert_eq!(f16.row_bytes(128), 256);
    assert_eq!(kvcache::DType::F32.describe().unwrap().row_bytes(3), 12);
    assert_eq!(kvcache::DType::Bf16.describe().unwrap().name, "bf16");
    let err = kvcache::describe_raw(7).err().unwrap();
    assert_eq!(err.code(), kvcache::Code::InvalidArgument);
    assert!(err.message().contains("format"), "{err}");
}
