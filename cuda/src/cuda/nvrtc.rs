//! NVRTC, the CUDA runtime compiler, loaded at run time (`libnvrtc.so.13`, `.12`, or the
//! unversioned name), and the one call the backend needs: source in, CUBIN or PTX out.
//!
//! Hand-written rather than `cudarc::nvrtc` for the reasons the driver's loader gives
//! ([`super::driver`]): cudarc panics on a missing library or symbol and types results as a
//! Rust enum; here a missing NVRTC is an error for the kernels that need it (the copy
//! engines run without any), the CUBIN entry points are optional (older NVRTC gives PTX),
//! and the search covers the toolkit's own directories and `CCL_NVRTC_LIBRARY`.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use libloading::Library;

use super::error::{CudaError, Result};

type NvrtcResult = c_int;
type NvrtcProgram = *mut c_void;

/// Library names tried in order when `CCL_NVRTC_LIBRARY` is not set.
pub const NVRTC_LIBRARIES: [&str; 9] = [
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so",
    "/usr/local/cuda/lib64/libnvrtc.so.13",
    "/usr/local/cuda/lib64/libnvrtc.so.12",
    "/usr/local/cuda/lib64/libnvrtc.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13",
    "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.12",
    "/usr/local/cuda/targets/sbsa-linux/lib/libnvrtc.so",
];

#[derive(Clone, Copy)]
struct NvrtcFns {
    nvrtcVersion: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult,
    nvrtcGetErrorString: unsafe extern "C" fn(NvrtcResult) -> *const c_char,
    nvrtcCreateProgram: unsafe extern "C" fn(
        *mut NvrtcProgram,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult,
    nvrtcDestroyProgram: unsafe extern "C" fn(*mut NvrtcProgram) -> NvrtcResult,
    nvrtcCompileProgram:
        unsafe extern "C" fn(NvrtcProgram, c_int, *const *const c_char) -> NvrtcResult,
    nvrtcGetProgramLogSize: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> NvrtcResult,
    nvrtcGetProgramLog: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> NvrtcResult,
    nvrtcGetPTXSize: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> NvrtcResult,
    nvrtcGetPTX: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> NvrtcResult,
    nvrtcGetCUBINSize: Option<unsafe extern "C" fn(NvrtcProgram, *mut usize) -> NvrtcResult>,
    nvrtcGetCUBIN: Option<unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> NvrtcResult>,
    nvrtcGetNumSupportedArchs: Option<unsafe extern "C" fn(*mut c_int) -> NvrtcResult>,
    nvrtcGetSupportedArchs: Option<unsafe extern "C" fn(*mut c_int) -> NvrtcResult>,
}

/// The loaded NVRTC library.
pub struct Nvrtc {
    fns: NvrtcFns,
    path: String,
    version: (i32, i32),
    supported_archs: Option<Vec<i32>>,
    _lib: Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

/// What NVRTC produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// Machine code for the exact architecture.
    Cubin,
    /// PTX (NUL-terminated), JIT-compiled by the driver at load time.
    Ptx,
}

/// A compiled module image, ready for `cuModuleLoadData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub kind: ImageKind,
    pub data: Vec<u8>,
}

/// The architecture option NVRTC is given for a device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// `sm_90` (CUBIN) or `compute_90` (PTX, for a device newer than this NVRTC).
    pub arch: String,
    pub kind: ImageKind,
}

/// # Safety
/// `T` is the function-pointer type of the symbol.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: the caller vouches for the type; the pointer lives as long as `lib`.
    unsafe { lib.get::<T>(name.as_bytes()) }.ok().map(|s| *s)
}

static NVRTC: OnceLock<Result<Nvrtc>> = OnceLock::new();

impl Nvrtc {
    /// The process-wide NVRTC, loaded on first use (`CCL_NVRTC_LIBRARY` overrides the
    /// search). The result, error included, is remembered.
    pub fn get() -> Result<&'static Nvrtc> {
        NVRTC
            .get_or_init(|| {
                let env = std::env::var("CCL_NVRTC_LIBRARY").ok();
                let mut candidates: Vec<String> = Vec::new();
                match env.as_deref() {
                    Some(p) if !p.is_empty() => candidates.push(p.to_string()),
                    _ => {
                        for var in ["CUDA_HOME", "CUDA_PATH"] {
                            if let Ok(home) = std::env::var(var) {
                                for v in [".13", ".12", ""] {
                                    candidates.push(format!("{home}/lib64/libnvrtc.so{v}"));
                                }
                            }
                        }
                        candidates.extend(NVRTC_LIBRARIES.iter().map(|s| s.to_string()));
                    }
                }
                let refs: Vec<&str> = candidates.iter().map(String::as_str).collect();
                Nvrtc::load(&refs)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Loads the first library of `candidates` that opens and has the needed functions.
    pub fn load(candidates: &[&str]) -> Result<Nvrtc> {
        let mut reasons = Vec::new();
        for &name in candidates {
            // SAFETY: loading NVRTC runs its initialisers, which have no preconditions.
            let lib = match unsafe { Library::new(name) } {
                Ok(l) => l,
                Err(e) => {
                    reasons.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let missing = |s: &str| CudaError::MissingSymbol {
                library: name.to_string(),
                symbol: s.to_string(),
            };
            macro_rules! req {
                ($n:literal) => {
                    // SAFETY: the symbol has the field's type per nvrtc.h.
                    unsafe { sym(&lib, $n) }.ok_or_else(|| missing($n))?
                };
            }
            macro_rules! opt {
                ($n:literal) => {
                    // SAFETY: the symbol has the field's type per nvrtc.h.
                    unsafe { sym(&lib, $n) }
                };
            }
            let fns = NvrtcFns {
                nvrtcVersion: req!("nvrtcVersion"),
                nvrtcGetErrorString: req!("nvrtcGetErrorString"),
                nvrtcCreateProgram: req!("nvrtcCreateProgram"),
                nvrtcDestroyProgram: req!("nvrtcDestroyProgram"),
                nvrtcCompileProgram: req!("nvrtcCompileProgram"),
                nvrtcGetProgramLogSize: req!("nvrtcGetProgramLogSize"),
                nvrtcGetProgramLog: req!("nvrtcGetProgramLog"),
                nvrtcGetPTXSize: req!("nvrtcGetPTXSize"),
                nvrtcGetPTX: req!("nvrtcGetPTX"),
                nvrtcGetCUBINSize: opt!("nvrtcGetCUBINSize"),
                nvrtcGetCUBIN: opt!("nvrtcGetCUBIN"),
                nvrtcGetNumSupportedArchs: opt!("nvrtcGetNumSupportedArchs"),
                nvrtcGetSupportedArchs: opt!("nvrtcGetSupportedArchs"),
            };
            let (mut major, mut minor) = (0, 0);
            // SAFETY: writes two ints.
            let r = unsafe { (fns.nvrtcVersion)(&mut major, &mut minor) };
            let mut nv = Nvrtc {
                fns,
                path: name.to_string(),
                version: (major, minor),
                supported_archs: None,
                _lib: lib,
            };
            nv.check("nvrtcVersion", r)?;
            nv.supported_archs = nv.query_archs();
            return Ok(nv);
        }
        Err(CudaError::NoNvrtc {
            tried: candidates.join(", "),
            reason: reasons.join("; "),
        })
    }

    fn query_archs(&self) -> Option<Vec<i32>> {
        let (num, get) = (
            self.fns.nvrtcGetNumSupportedArchs?,
            self.fns.nvrtcGetSupportedArchs?,
        );
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        if unsafe { num(&mut n) } != 0 || n <= 0 || n > 1024 {
            return None;
        }
        let mut v = vec![0 as c_int; n as usize];
        // SAFETY: writes `n` ints into a buffer of `n`.
        if unsafe { get(v.as_mut_ptr()) } != 0 {
            return None;
        }
        Some(v)
    }

    fn check(&self, call: &'static str, r: NvrtcResult) -> Result<()> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: returns a static NUL-terminated string for any code.
        let p = unsafe { (self.fns.nvrtcGetErrorString)(r) };
        let message = if p.is_null() {
            "unknown".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(CudaError::Nvrtc {
            call,
            code: r,
            message,
        })
    }

    /// The library that was loaded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `(major, minor)` of the library.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The architecture to compile for a device of compute capability `cc`: its own
    /// `sm_XY` (CUBIN) when this NVRTC knows it, otherwise PTX for the newest virtual
    /// architecture NVRTC knows below it (the driver compiles PTX forward).
    pub fn target(&self, cc: (i32, i32)) -> Target {
        let want = cc.0 * 10 + cc.1;
        let cubin_ok = self.fns.nvrtcGetCUBIN.is_some() && self.fns.nvrtcGetCUBINSize.is_some();
        match &self.supported_archs {
            Some(archs) if !archs.contains(&want) => {
                if let Some(best) = archs.iter().copied().filter(|&a| a < want).max() {
                    return Target {
                        arch: format!("compute_{best}"),
                        kind: ImageKind::Ptx,
                    };
                }
            }
            _ => {}
        }
        if cubin_ok {
            Target {
                arch: format!("sm_{want}"),
                kind: ImageKind::Cubin,
            }
        } else {
            Target {
                arch: format!("compute_{want}"),
                kind: ImageKind::Ptx,
            }
        }
    }

    /// Compiles `source` (named `name` in diagnostics) for `target` with the options every
    /// kernel here relies on: IEEE division and square root, no flush to zero, no fused
    /// multiply-add contraction (the host reference rounds every operation separately).
    pub fn compile(&self, source: &str, name: &str, target: &Target) -> Result<Image> {
        let bad = |what: &str| CudaError::InvalidArgument(format!("{what} contains a NUL byte"));
        let src = CString::new(source).map_err(|_| bad("kernel source"))?;
        let cname = CString::new(name).map_err(|_| bad("kernel name"))?;
        let opts: Vec<CString> = [
            format!("--gpu-architecture={}", target.arch),
            "--fmad=false".to_string(),
            "--ftz=false".to_string(),
            "--prec-div=true".to_string(),
            "--prec-sqrt=true".to_string(),
        ]
        .into_iter()
        .filter_map(|o| CString::new(o).ok())
        .collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();

        let mut prog: NvrtcProgram = std::ptr::null_mut();
        // SAFETY: the strings are NUL-terminated and outlive the call; no headers.
        let r = unsafe {
            (self.fns.nvrtcCreateProgram)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check("nvrtcCreateProgram", r)?;
        let guard = ProgramGuard { nv: self, prog };
        // SAFETY: `prog` is live; the option pointers are valid for the call.
        let r = unsafe {
            (self.fns.nvrtcCompileProgram)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr())
        };
        if r != 0 {
            let log = guard.log();
            return Err(CudaError::Compile {
                kernel: name.to_string(),
                arch: target.arch.clone(),
                log: if log.is_empty() {
                    format!("{:?}", self.check("nvrtcCompileProgram", r).err())
                } else {
                    log
                },
            });
        }
        if target.kind == ImageKind::Cubin {
            if let (Some(size_f), Some(get_f)) =
                (self.fns.nvrtcGetCUBINSize, self.fns.nvrtcGetCUBIN)
            {
                let mut size = 0usize;
                // SAFETY: writes one size_t.
                let r = unsafe { size_f(prog, &mut size) };
                if r == 0 && size > 0 {
                    let mut data = vec![0u8; size];
                    // SAFETY: writes exactly `size` bytes.
                    let r = unsafe { get_f(prog, data.as_mut_ptr().cast()) };
                    self.check("nvrtcGetCUBIN", r)?;
                    return Ok(Image {
                        kind: ImageKind::Cubin,
                        data,
                    });
                }
            }
        }
        let mut size = 0usize;
        // SAFETY: writes one size_t.
        let r = unsafe { (self.fns.nvrtcGetPTXSize)(prog, &mut size) };
        self.check("nvrtcGetPTXSize", r)?;
        let mut data = vec![0u8; size.max(1)];
        // SAFETY: writes exactly `size` bytes (NUL included).
        let r = unsafe { (self.fns.nvrtcGetPTX)(prog, data.as_mut_ptr().cast()) };
        self.check("nvrtcGetPTX", r)?;
        if data.last() != Some(&0) {
            data.push(0);
        }
        Ok(Image {
            kind: ImageKind::Ptx,
            data,
        })
    }
}

struct ProgramGuard<'a> {
    nv: &'a Nvrtc,
    prog: NvrtcProgram,
}

impl ProgramGuard<'_> {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: writes one size_t.
        if unsafe { (self.nv.fns.nvrtcGetProgramLogSize)(self.prog, &mut size) } != 0 || size == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: writes exactly `size` bytes.
        if unsafe { (self.nv.fns.nvrtcGetProgramLog)(self.prog, buf.as_mut_ptr().cast()) } != 0 {
            return String::new();
        }
        String::from_utf8_lossy(&buf)
            .trim_end_matches('\0')
            .trim()
            .to_string()
    }
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `prog` was created by nvrtcCreateProgram and is destroyed once.
        let _ = unsafe { (self.nv.fns.nvrtcDestroyProgram)(&mut self.prog) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_nvrtc_is_a_clean_error() {
        let e = Nvrtc::load(&["/nonexistent/libnvrtc.so.13"]).err();
        assert!(matches!(e, Some(CudaError::NoNvrtc { .. })), "{e:?}");
    }
}
