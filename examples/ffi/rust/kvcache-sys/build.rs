// Links libkvcache from the folder locate_library.rs finds and exports that folder to the
// build scripts of direct dependents as DEP_KVCACHE_LIBDIR: the link arguments of a build
// script apply to its own package only, so a binary that wants libkvcache's folder as an
// rpath sets it in its own build.rs from this variable (docs/ffi.md, Rust).
#[path = "locate_library.rs"]
mod locate;

fn main() {
    let dir = locate::lib_dir();
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=dylib=kvcache");
    println!("cargo:libdir={dir}");
}
