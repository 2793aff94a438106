//! What the tests that run kernel sources as host C++ share: the host stand-ins for the
//! inline-PTX primitives, g++, and the point-to-point kernel built for real host threads.

#![allow(dead_code)] // each test file uses its own part
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::path::PathBuf;
use std::process::Command;

use ccl_cuda::cuda::source::{kernel_source_with, KernelOp};
use ccl_cuda::DataType;

pub const HOST_INCLUDES: &str = "#include <cstring>\n#include <cmath>\n#include <sched.h>\n";

pub const HOST_PRIMITIVES: &str = r#"
#define __device__
#define __global__
#define __forceinline__ inline
struct ccl_dim3 { unsigned x, y, z; };
static const ccl_dim3 gridDim = {1, 1, 1}, blockDim = {1, 1, 1}, threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;
static inline u32 f2u(float f) { u32 u; std::memcpy(&u, &f, 4); return u; }
static inline float u2f(u32 u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline u64 d2u(double d) { u64 u; std::memcpy(&u, &d, 8); return u; }
static inline double u2d(u64 u) { double d; std::memcpy(&d, &u, 8); return d; }
static inline float add_f(float x, float y) { return x + y; }
static inline float mul_f(float x, float y) { return x * y; }
static inline float fma_f(float x, float y, float z) { return std::fmaf(x, y, z); }
static inline double add_d(double x, double y) { return x + y; }
static inline double sub_d(double x, double y) { return x - y; }
static inline double mul_d(double x, double y) { return x * y; }
static inline double div_d(double x, double y) { return x / y; }
static inline double fma_d(double x, double y, double z) { return std::fma(x, y, z); }
static inline double f2d(float x) { return (double)x; }
static inline float d2f(double x) { return (float)x; }
static inline float d2f_rz(double x) {
  float f = (float)x;
  if (std::fabs((double)f) > std::fabs(x)) f = std::nextafterf(f, 0.0f);
  return f;
}
static inline double u64_to_d(u64 x) { return (double)x; }
static inline u32 rni_u32(float x) { return (u32)std::nearbyintf(x); }
static inline void ccl_ld16(const void* p, u32* v) { std::memcpy(v, p, 16); }
static inline void ccl_ld16_fresh(const void* p, u32* v) {
  // Two whole 8-byte loads, as the GPU's 16-byte load is two whole halves (packed lines rely
  // on it); the callers pass 16-byte-aligned addresses.
  u64 a = __atomic_load_n((const u64*)p, __ATOMIC_ACQUIRE);
  u64 b = __atomic_load_n((const u64*)p + 1, __ATOMIC_ACQUIRE);
  std::memcpy(v, &a, 8);
  std::memcpy(v + 2, &b, 8);
}
static inline void ccl_st16(void* p, const u32* v) { std::memcpy(p, v, 16); }
static inline void ccl_st16_volatile(void* p, const u32* v) {
  u64 a, b;
  std::memcpy(&a, v, 8);
  std::memcpy(&b, v + 2, 8);
  __atomic_store_n((u64*)p, a, __ATOMIC_RELEASE);
  __atomic_store_n((u64*)p + 1, b, __ATOMIC_RELEASE);
}
static inline void ccl_backoff() { sched_yield(); }
static inline void ccl_spin() { sched_yield(); }
"#;

/// Whether g++ is here to build the kernel sources for the host; says why a test skips if not.
pub fn gxx_here(skip_message: &str) -> bool {
    let here = Command::new("g++").arg("--version").output().is_ok();
    if !here {
        eprintln!("{skip_message}");
    }
    here
}

/// Runs a g++ command that must succeed (its errors are the failure message).
pub fn gxx(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds a kernel's host C++ as a shared library in a fresh temporary folder (returned, for
/// the caller to remove) and returns the library's path.
pub fn build_shared(tag: &str, src: &str, opt: &str) -> (PathBuf, PathBuf) {
    // Tests of one binary run on parallel threads and may build the same tag at once: each
    // build gets a folder of its own, or one test loads a library another is still writing
    // (or has removed).
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ccl-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cpp, so) = (
        dir.join(format!("{tag}.cpp")),
        dir.join(format!("lib{tag}.so")),
    );
    std::fs::write(&cpp, src).unwrap();
    gxx(Command::new("g++")
        .args(["-std=c++17", opt, "-fPIC", "-shared", "-Wall", "-pthread"])
        .arg(&cpp)
        .arg("-o")
        .arg(&so));
    (dir, so)
}

pub type LlP2pFn =
    unsafe extern "C" fn(ccl_cuda::cuda::LlP2p, *const u64, u32, u32, u64, u32, *mut u32);

/// Builds the point-to-point kernel's C++ for the host: a per-thread block index (set through
/// `ccl_host_set_block`) and fences that order the host's stores as the GPU's do.
pub fn ll_p2p_host_library() -> (PathBuf, PathBuf) {
    let prims = HOST_PRIMITIVES.replace(
        "threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};",
        "threadIdx = {0, 0, 0};\nstatic thread_local ccl_dim3 blockIdx = {0, 0, 0};\n\
         extern \"C\" void ccl_host_set_block(unsigned b) { blockIdx.x = b; }",
    );
    let stubs = "#define __shared__\nstatic inline void __syncthreads() {}\n\
                 static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n\
                 static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n";
    let src = format!(
        "{HOST_INCLUDES}{}",
        kernel_source_with(DataType::Uint8, KernelOp::LlP2p, &format!("{prims}{stubs}"))
            .replace("extern \"C\" __global__", "extern \"C\"")
    );
    build_shared("ll_p2p", &src, "-O2")
}
