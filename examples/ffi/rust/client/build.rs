// libkvcache's folder, as kvcache-sys found it, becomes the binary's rpath, so that it starts
// without LD_LIBRARY_PATH (docs/ffi.md, Rust).
fn main() {
    let dir = std::env::var("DEP_KVCACHE_LIBDIR").expect("kvcache-sys is a dependency");
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
}
