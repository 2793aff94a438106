//! Buffers and streams: device memory through the CUDA driver API (`libcuda.so.1`, loaded at
//! run time) when a GPU is usable, else host memory with a NULL stream.
//!
//! With host memory, ccl-perf assumes the library has finished an operation when the call
//! (or the enclosing `ncclGroupEnd`) returns on the NULL stream: nccl.h has no host-side
//! stream wait, so there is nothing else to wait on.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::rc::Rc;

use libloading::Library;

use crate::{Error, Result};

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuStream = *mut c_void;
type CuPtr = u64;
type CuGraph = *mut c_void;
type CuGraphExec = *mut c_void;

/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`, as nccl-tests captures.
const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: c_int = 1;

const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: c_int = 33;

/// The driver entry points ccl-perf uses.
pub struct Cuda {
    _lib: Library,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    primary_ctx_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuPtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuPtr) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(CuPtr, *const c_void, usize, CuStream) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuPtr, usize, CuStream) -> CuResult,
    memset_d8: unsafe extern "C" fn(CuPtr, u8, usize, CuStream) -> CuResult,
    stream_create: unsafe extern "C" fn(*mut CuStream, c_uint) -> CuResult,
    stream_sync: unsafe extern "C" fn(CuStream) -> CuResult,
    stream_destroy: unsafe extern "C" fn(CuStream) -> CuResult,
    get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    begin_capture: unsafe extern "C" fn(CuStream, c_int) -> CuResult,
    end_capture: unsafe extern "C" fn(CuStream, *mut CuGraph) -> CuResult,
    graph_instantiate: unsafe extern "C" fn(*mut CuGraphExec, CuGraph, u64) -> CuResult,
    graph_launch: unsafe extern "C" fn(CuGraphExec, CuStream) -> CuResult,
    graph_exec_destroy: unsafe extern "C" fn(CuGraphExec) -> CuResult,
    graph_destroy: unsafe extern "C" fn(CuGraph) -> CuResult,
    /// Number of devices (after cuInit succeeded).
    pub count: usize,
}

/// # Safety
/// `T` must be the symbol's true C signature.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T> {
    let cname = format!("{name}\0");
    // SAFETY: forwarded; the library is stored next to the pointers.
    match unsafe { lib.get::<T>(cname.as_bytes()) } {
        Ok(s) => Ok(*s),
        Err(e) => Err(Error(format!("libcuda lacks {name}: {e}"))),
    }
}

impl Cuda {
    /// Loads the driver and initialises it; `Ok(None)` when there is no usable GPU.
    pub fn load() -> Result<Option<Cuda>> {
        // SAFETY: loading the driver library runs its initialisers.
        let lib = match unsafe { Library::new("libcuda.so.1") } {
            Ok(l) => l,
            Err(_) => return Ok(None),
        };
        // SAFETY: signatures from cuda.h (the `_v2` names are the current ABI).
        unsafe {
            let init: unsafe extern "C" fn(c_uint) -> CuResult = sym(&lib, "cuInit")?;
            if init(0) != 0 {
                return Ok(None);
            }
            let get_count: unsafe extern "C" fn(*mut c_int) -> CuResult =
                sym(&lib, "cuDeviceGetCount")?;
            let mut n: c_int = 0;
            if get_count(&mut n) != 0 || n <= 0 {
                return Ok(None);
            }
            Ok(Some(Cuda {
                device_get: sym(&lib, "cuDeviceGet")?,
                device_get_name: sym(&lib, "cuDeviceGetName")?,
                device_get_attribute: sym(&lib, "cuDeviceGetAttribute")?,
                primary_ctx_retain: sym(&lib, "cuDevicePrimaryCtxRetain")?,
                primary_ctx_release: sym(&lib, "cuDevicePrimaryCtxRelease_v2")?,
                ctx_set_current: sym(&lib, "cuCtxSetCurrent")?,
                mem_alloc: sym(&lib, "cuMemAlloc_v2")?,
                mem_free: sym(&lib, "cuMemFree_v2")?,
                memcpy_htod: sym(&lib, "cuMemcpyHtoDAsync_v2")?,
                memcpy_dtoh: sym(&lib, "cuMemcpyDtoHAsync_v2")?,
                memset_d8: sym(&lib, "cuMemsetD8Async")?,
                stream_create: sym(&lib, "cuStreamCreate")?,
                stream_sync: sym(&lib, "cuStreamSynchronize")?,
                stream_destroy: sym(&lib, "cuStreamDestroy_v2")?,
                get_error_string: sym(&lib, "cuGetErrorString")?,
                begin_capture: sym(&lib, "cuStreamBeginCapture_v2")?,
                end_capture: sym(&lib, "cuStreamEndCapture")?,
                graph_instantiate: sym(&lib, "cuGraphInstantiateWithFlags")?,
                graph_launch: sym(&lib, "cuGraphLaunch")?,
                graph_exec_destroy: sym(&lib, "cuGraphExecDestroy")?,
                graph_destroy: sym(&lib, "cuGraphDestroy")?,
                count: n as usize,
                _lib: lib,
            }))
        }
    }

    fn check(&self, call: &str, rc: CuResult) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: valid out pointer; the driver returns a static string.
        unsafe { (self.get_error_string)(rc, &mut p) };
        let what = if p.is_null() {
            format!("CUDA error {rc}")
        } else {
            // SAFETY: non-NULL static NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(Error(format!("{call} failed: {what}")))
    }
}

/// Where a local rank's buffers live, and its stream.
pub enum Device {
    Host,
    Cuda {
        cuda: Rc<Cuda>,
        dev: CuDevice,
        ordinal: usize,
        ctx: CuContext,
        stream: CuStream,
    },
}

/// A captured, instantiated CUDA graph.
pub struct Graph {
    cuda: Rc<Cuda>,
    graph: CuGraph,
    exec: CuGraphExec,
}

impl Graph {
    /// Instantiates the captured graph.
    pub fn instantiate(&mut self) -> Result<()> {
        let mut exec: CuGraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is a captured graph; writes one executable graph handle.
        let rc = unsafe { (self.cuda.graph_instantiate)(&mut exec, self.graph, 0) };
        self.exec = exec;
        self.cuda.check("cuGraphInstantiateWithFlags", rc)
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: handles from end_capture (null where instantiation failed), destroyed once;
        // the launches were synchronised before the graph drops.
        unsafe {
            if !self.exec.is_null() {
                (self.cuda.graph_exec_destroy)(self.exec);
            }
            if !self.graph.is_null() {
                (self.cuda.graph_destroy)(self.graph);
            }
        }
    }
}

/// A buffer of `len` bytes.
pub struct Mem {
    ptr: *mut u8,
    len: usize,
    /// The driver and the context that owns the allocation (None: host memory).
    cuda: Option<(Rc<Cuda>, CuContext)>,
}

impl Drop for Mem {
    fn drop(&mut self) {
        match &self.cuda {
            Some((c, ctx)) => {
                // SAFETY: allocated by cuMemAlloc in `ctx` (still retained: buffers drop before
                // their device) and freed once; errors at teardown are moot.
                unsafe {
                    (c.ctx_set_current)(*ctx);
                    (c.mem_free)(self.ptr as CuPtr);
                }
            }
            None => {
                // SAFETY: allocated by posix_memalign and freed once.
                unsafe { libc::free(self.ptr.cast()) };
            }
        }
    }
}

impl Mem {
    /// The address `off` bytes in, as nccl wants it.
    pub fn at(&self, off: usize) -> *mut c_void {
        self.ptr.wrapping_add(off).cast()
    }

    fn range(&self, off: usize, n: usize) -> Result<()> {
        if off.checked_add(n).is_some_and(|e| e <= self.len) {
            Ok(())
        } else {
            Err(Error(format!(
                "buffer access {off}+{n} outside {} bytes",
                self.len
            )))
        }
    }
}

impl Device {
    /// Opens device `ordinal`: its primary context, made current, and a non-blocking stream.
    pub fn cuda(cuda: Rc<Cuda>, ordinal: usize) -> Result<Device> {
        let mut dev: CuDevice = 0;
        let ord = c_int::try_from(ordinal).map_err(|_| Error("device ordinal".into()))?;
        // SAFETY: valid out pointers throughout.
        cuda.check("cuDeviceGet", unsafe { (cuda.device_get)(&mut dev, ord) })?;
        let mut ctx: CuContext = std::ptr::null_mut();
        // SAFETY: as above.
        cuda.check("cuDevicePrimaryCtxRetain", unsafe {
            (cuda.primary_ctx_retain)(&mut ctx, dev)
        })?;
        // SAFETY: `ctx` is the retained primary context.
        cuda.check("cuCtxSetCurrent", unsafe { (cuda.ctx_set_current)(ctx) })?;
        let mut stream: CuStream = std::ptr::null_mut();
        // SAFETY: valid out pointer; the context is current.
        cuda.check("cuStreamCreate", unsafe {
            (cuda.stream_create)(&mut stream, CU_STREAM_NON_BLOCKING)
        })?;
        Ok(Device::Cuda {
            cuda,
            dev,
            ordinal,
            ctx,
            stream,
        })
    }

    /// Makes this device's context current (NCCL takes the device from it).
    pub fn make_current(&self) -> Result<()> {
        if let Device::Cuda { cuda, ctx, .. } = self {
            // SAFETY: a retained primary context.
            cuda.check("cuCtxSetCurrent", unsafe { (cuda.ctx_set_current)(*ctx) })?;
        }
        Ok(())
    }

    /// The stream handed to nccl (NULL with host memory).
    pub fn stream(&self) -> *mut c_void {
        match self {
            Device::Host => std::ptr::null_mut(),
            Device::Cuda { stream, .. } => *stream,
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda { .. })
    }

    /// `device N [0xBB] name` as nccl-tests prints it, or a host-memory note.
    pub fn describe(&self) -> String {
        match self {
            Device::Host => "device  - [host] host memory, NULL stream".to_string(),
            Device::Cuda {
                cuda, dev, ordinal, ..
            } => {
                let mut name = [0 as c_char; 256];
                let mut bus: c_int = 0;
                // SAFETY: the buffer holds 256 bytes; out pointers valid.
                unsafe {
                    (cuda.device_get_name)(name.as_mut_ptr(), 255, *dev);
                    (cuda.device_get_attribute)(&mut bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, *dev);
                }
                // SAFETY: NUL-terminated within the buffer (zeroed, 255 written at most).
                let name = unsafe { CStr::from_ptr(name.as_ptr()) }
                    .to_string_lossy()
                    .into_owned();
                format!("device {ordinal:2} [0x{bus:02x}] {name}")
            }
        }
    }

    pub fn alloc(&self, len: usize) -> Result<Mem> {
        let bytes = len.max(64);
        match self {
            Device::Host => {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: valid out pointer; alignment is a power of two multiple of void*.
                let rc = unsafe { libc::posix_memalign(&mut p, 4096, bytes) };
                if rc != 0 || p.is_null() {
                    return Err(Error(format!(
                        "cannot allocate {bytes} bytes of host memory"
                    )));
                }
                Ok(Mem {
                    ptr: p.cast(),
                    len,
                    cuda: None,
                })
            }
            Device::Cuda { cuda, ctx, .. } => {
                self.make_current()?;
                let mut p: CuPtr = 0;
                // SAFETY: valid out pointer; the context is current.
                cuda.check("cuMemAlloc", unsafe { (cuda.mem_alloc)(&mut p, bytes) })?;
                Ok(Mem {
                    ptr: p as *mut u8,
                    len,
                    cuda: Some((cuda.clone(), *ctx)),
                })
            }
        }
    }

    /// Starts capturing the stream into a CUDA graph (device memory only).
    pub fn begin_capture(&self) -> Result<()> {
        let Device::Cuda { cuda, stream, .. } = self else {
            return Err(Error("-G needs device memory".into()));
        };
        self.make_current()?;
        // SAFETY: a live stream of the current context.
        cuda.check("cuStreamBeginCapture", unsafe {
            (cuda.begin_capture)(*stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        })
    }

    /// Ends the capture `begin_capture` started; [`Graph::instantiate`] makes it launchable
    /// (only once no stream of the thread captures any more: one thread capturing several
    /// ranks' streams, `-g`, ends them all first).
    pub fn end_capture(&self) -> Result<Graph> {
        let Device::Cuda { cuda, stream, .. } = self else {
            return Err(Error("-G needs device memory".into()));
        };
        self.make_current()?;
        let mut graph: CuGraph = std::ptr::null_mut();
        // SAFETY: the stream is capturing (begin_capture); writes one graph handle.
        cuda.check("cuStreamEndCapture", unsafe {
            (cuda.end_capture)(*stream, &mut graph)
        })?;
        Ok(Graph {
            cuda: cuda.clone(),
            graph,
            exec: std::ptr::null_mut(),
        })
    }

    /// Launches `g` on the stream.
    pub fn launch(&self, g: &Graph) -> Result<()> {
        let Device::Cuda { cuda, stream, .. } = self else {
            return Err(Error("-G needs device memory".into()));
        };
        // SAFETY: an instantiated graph and a live stream of its context.
        cuda.check("cuGraphLaunch", unsafe {
            (cuda.graph_launch)(g.exec, *stream)
        })
    }

    /// Waits for everything queued on the stream.
    pub fn sync(&self) -> Result<()> {
        if let Device::Cuda { cuda, stream, .. } = self {
            // SAFETY: a live stream.
            cuda.check("cuStreamSynchronize", unsafe {
                (cuda.stream_sync)(*stream)
            })?;
        }
        Ok(())
    }

    /// Copies `data` to `mem + off` and waits for the copy.
    pub fn write(&self, mem: &Mem, off: usize, data: &[u8]) -> Result<()> {
        mem.range(off, data.len())?;
        match self {
            Device::Host => {
                // SAFETY: the range check above keeps the copy inside the allocation.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), mem.ptr.add(off), data.len())
                };
                Ok(())
            }
            Device::Cuda { cuda, stream, .. } => {
                self.make_current()?;
                // SAFETY: in range; `data` lives until the stream sync below.
                cuda.check("cuMemcpyHtoDAsync", unsafe {
                    (cuda.memcpy_htod)(
                        mem.ptr as CuPtr + off as CuPtr,
                        data.as_ptr().cast(),
                        data.len(),
                        *stream,
                    )
                })?;
                self.sync()
            }
        }
    }

    /// Sets `n` bytes at `mem + off` to `byte` and waits.
    pub fn fill(&self, mem: &Mem, off: usize, n: usize, byte: u8) -> Result<()> {
        mem.range(off, n)?;
        match self {
            Device::Host => {
                // SAFETY: in range.
                unsafe { std::ptr::write_bytes(mem.ptr.add(off), byte, n) };
                Ok(())
            }
            Device::Cuda { cuda, stream, .. } => {
                self.make_current()?;
                // SAFETY: in range.
                cuda.check("cuMemsetD8Async", unsafe {
                    (cuda.memset_d8)(mem.ptr as CuPtr + off as CuPtr, byte, n, *stream)
                })?;
                self.sync()
            }
        }
    }

    /// Reads `n` bytes from `mem + off` (after everything queued on the stream).
    pub fn read(&self, mem: &Mem, off: usize, n: usize) -> Result<Vec<u8>> {
        mem.range(off, n)?;
        let mut out = vec![0u8; n];
        match self {
            Device::Host => {
                // SAFETY: in range; `out` holds n bytes.
                unsafe { std::ptr::copy_nonoverlapping(mem.ptr.add(off), out.as_mut_ptr(), n) };
            }
            Device::Cuda { cuda, stream, .. } => {
                self.make_current()?;
                // SAFETY: in range; `out` lives until the sync below.
                cuda.check("cuMemcpyDtoHAsync", unsafe {
                    (cuda.memcpy_dtoh)(
                        out.as_mut_ptr().cast(),
                        mem.ptr as CuPtr + off as CuPtr,
                        n,
                        *stream,
                    )
                })?;
                self.sync()?;
            }
        }
        Ok(out)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Device::Cuda {
            cuda, dev, stream, ..
        } = self
        {
            // SAFETY: the stream and the primary-context reference were created in
            // `Device::cuda` and are released once.
            unsafe {
                (cuda.stream_destroy)(*stream);
                (cuda.primary_ctx_release)(*dev);
            }
        }
    }
}
