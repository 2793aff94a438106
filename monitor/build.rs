// The workspace lints are inherited as a whole, so the `loom` cfg is declared here rather than
// in a `[lints.rust]` table of this crate. The profiler plugins' logger is a C variadic
// function (src/plugin/logger.c), which Rust cannot define.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
    println!("cargo:rerun-if-changed=src/plugin/logger.c");
    cc::Build::new()
        .file("src/plugin/logger.c")
        .warnings(true)
        .compile("ccl_profiler_logger");
}
