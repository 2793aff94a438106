// The profiler plugins' logger is a C variadic function (see src/profiler/logger.c).
fn main() {
    println!("cargo:rerun-if-changed=src/profiler/logger.c");
    cc::Build::new()
        .file("src/profiler/logger.c")
        .warnings(true)
        .compile("ccl_profiler_logger");
}
