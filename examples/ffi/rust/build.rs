// This crate's tests run from the build tree: they get the folder kvcache-sys linked from as
// an rpath, as a user's binary does (docs/ffi.md, Rust).
fn main() {
    let dir = std::env::var("DEP_KVCACHE_LIBDIR").expect("kvcache-sys exports DEP_KVCACHE_LIBDIR");
    println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
}
