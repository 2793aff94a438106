// The library is loaded by its soname, `libnccl.so.2`, exactly as NVIDIA's is.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
    println!("cargo:rerun-if-changed=build.rs");
}
