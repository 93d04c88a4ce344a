//! The hand-written structs of `sys` against the C ABI: their sizes equal the committed x86-64
//! layout list (tests/abi/layout_x86_64.txt), and each `*_init_sized` call with the Rust size
//! writes that many bytes, no more (canary bytes follow the struct), and sets struct_size to it.
use std::mem::{size_of, MaybeUninit};

use kvcache::sys;

const CANARY: u8 = 0xA5;

/// A struct followed by canary bytes (the array of u8 starts right at `size_of::<T>()`).
#[repr(C)]
struct Guarded<T> {
    value: MaybeUninit<T>,
    canary: [u8; 64],
}

fn guarded<T>() -> Guarded<T> {
    // SAFETY: any bytes are valid for MaybeUninit and u8.
    let mut g: Guarded<T> = unsafe { MaybeUninit::zeroed().assume_init() };
    // SAFETY: the whole Guarded is plain bytes here.
    unsafe { std::ptr::write_bytes(&mut g as *mut Guarded<T> as *mut u8, CANARY, size_of::<Guarded<T>>()) };
    g
}

macro_rules! check_init {
    ($ty:ty, |$p:ident, $size:ident| $init:expr) => {{
        let mut g = guarded::<$ty>();
        let $p = g.value.as_mut_ptr();
        let $size = size_of::<$ty>();
        // SAFETY: the init function writes at most `size` bytes of this type.
        unsafe { $init };
        assert!(g.canary.iter().all(|&b| b == CANARY), "{} init wrote past its struct", stringify!($ty));
        // SAFETY: the init wrote every byte of the struct.
        let value = unsafe { g.value.assume_init() };
        assert_eq!(value.struct_size as usize, size_of::<$ty>(), "{}", stringify!($ty));
        value
    }};
}

#[test]
fn sized_inits_write_the_rust_struct_and_nothing_past_it() {
    use std::ptr::null;
    let params = check_init!(sys::kvc_cache_params, |p, n| sys::kvc_cache_params_init_sized(p, n));
    assert_eq!(params.head_dim, 64);
    check_init!(sys::kvc_cache_stats, |p, n| sys::kvc_cache_stats_init_sized(p, n));
    check_init!(sys::kvc_policy_info, |p, n| sys::kvc_policy_info_init_sized(p, n));
    check_init!(sys::kvc_attention_params, |p, n| sys::kvc_attention_params_init_sized(p, n));
    let request =
        check_init!(sys::kvc_estimate_request, |p, n| sys::kvc_estimate_request_init_sized(p, n, 7, 3, 5));
    assert_eq!((request.prompt_tokens, request.chunk_tokens, request.new_tokens), (7, 3, 5));
    assert_eq!(request.marks_prompt_end, 0);
    let batch =
        check_init!(sys::kvc_batch, |p, n| sys::kvc_batch_init_sized(p, n, 0, null(), null(), null()));
    assert!(batch.prompt_end.is_null() && batch.stream.is_null());
    let prefix = check_init!(sys::kvc_prefix, |p, n| sys::kvc_prefix_init_sized(p, n, null(), null(), 0));
    assert_eq!(prefix.chunk_tokens, 256);
}

#[test]
#[cfg(target_arch = "x86_64")]
fn struct_sizes_match_the_committed_layout() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../tests/abi/layout_x86_64.txt");
    let text = std::fs::read_to_string(path).expect("tests/abi/layout_x86_64.txt");
    let size_of_c = |name: &str| -> usize {
        let prefix = format!("{name} size ");
        let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{name}"));
        line[prefix.len()..].split(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(size_of::<sys::kvc_cache_params>(), size_of_c("kvc_cache_params"));
    assert_eq!(size_of::<sys::kvc_cache_stats>(), size_of_c("kvc_cache_stats"));
    assert_eq!(size_of::<sys::kvc_policy_info>(), size_of_c("kvc_policy_info"));
    assert_eq!(size_of::<sys::kvc_attention_params>(), size_of_c("kvc_attention_params"));
    assert_eq!(size_of::<sys::kvc_estimate_request>(), size_of_c("kvc_estimate_request"));
    assert_eq!(size_of::<sys::kvc_batch>(), size_of_c("kvc_batch"));
    assert_eq!(size_of::<sys::kvc_prefix>(), size_of_c("kvc_prefix"));
    assert_eq!(size_of::<sys::kvc_plugin_info>(), size_of_c("kvc_plugin_info"));
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
fn names_sizes_and_version_from_the_library() {
    assert_eq!(kvcache::Code::NotFound.name(), "NOT_FOUND");
    assert_eq!(kvcache::Code::Io.name(), "IO");
    assert_eq!(kvcache::Code::Other(99).name(), "UNKNOWN");
    assert_eq!(kvcache::DType::Bf16.size(), 2);
    assert_eq!(kvcache::DType::Q8_0.size(), 0);
    assert_eq!(kvcache::DType::Q4_0.name(), "q4_0");
    let number = kvcache::version_number();
    let text: Vec<u32> = kvcache::version().split('.').map(|part| part.parse().unwrap()).collect();
    assert_eq!(number, text[0] * 10000 + text[1] * 100 + text[2]);
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
