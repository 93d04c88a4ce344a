// Links libkvcache and, for this crate's tests, records its folder as an rpath.
#[path = "locate_library.rs"]
mod locate;

fn main() {
    if let Some(dir) = locate::lib_dir() {
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
    }
    println!("cargo:rustc-link-lib=dylib=kvcache");
}
