//! The few MPI calls ccl-perf needs, from OpenMPI's `libmpi.so.40` loaded at run time.
//!
//! OpenMPI's handles (`MPI_COMM_WORLD`, `MPI_BYTE`, `MPI_SUM`, ...) are the addresses of
//! exported globals (`ompi_mpi_comm_world`, ...), checked with `nm -D` on libmpi.so.40
//! (OpenMPI 4.1).

use std::ffi::{c_int, c_void};

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use crate::{Error, Result};

type Handle = *mut c_void;

/// How per-rank times are combined (nccl-tests' `-a`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    Rank0,
    Avg,
    Min,
    Max,
}

pub struct Mpi {
    _lib: Library,
    world: Handle,
    byte: Handle,
    long_long: Handle,
    double: Handle,
    op_sum: Handle,
    op_max: Handle,
    op_min: Handle,
    finalize: unsafe extern "C" fn() -> c_int,
    comm_rank: unsafe extern "C" fn(Handle, *mut c_int) -> c_int,
    comm_size: unsafe extern "C" fn(Handle, *mut c_int) -> c_int,
    bcast: unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, Handle) -> c_int,
    allreduce:
        unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, Handle) -> c_int,
    barrier: unsafe extern "C" fn(Handle) -> c_int,
    gather: unsafe extern "C" fn(
        *const c_void,
        c_int,
        Handle,
        *mut c_void,
        c_int,
        Handle,
        c_int,
        Handle,
    ) -> c_int,
    abort: unsafe extern "C" fn(Handle, c_int) -> c_int,
    pub rank: usize,
    pub size: usize,
}

/// # Safety
/// `T` must be the symbol's true type.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T> {
    let cname = format!("{name}\0");
    // SAFETY: forwarded from the caller; the library is kept alive in `Mpi`.
    match unsafe { lib.get::<T>(cname.as_bytes()) } {
        Ok(s) => Ok(*s),
        Err(e) => Err(Error(format!("libmpi lacks {name}: {e}"))),
    }
}

/// The address of an exported global (an OpenMPI predefined handle).
fn global(lib: &Library, name: &str) -> Result<Handle> {
    let cname = format!("{name}\0");
    // SAFETY: the symbol is only taken as an address, never read through here.
    let s = unsafe { lib.get::<*mut c_void>(cname.as_bytes()) }
        .map_err(|e| Error(format!("libmpi lacks {name}: {e}")))?;
    let p = s.into_raw();
    if p.is_null() {
        return Err(Error(format!("libmpi symbol {name} has no address")));
    }
    Ok(p)
}

fn check(call: &str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error(format!("{call} failed: MPI error {rc}")))
    }
}

fn count(n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| Error(format!("MPI count {n} too large")))
}

impl Mpi {
    /// Loads OpenMPI and calls `MPI_Init`.
    pub fn init(path: &str) -> Result<Mpi> {
        // OpenMPI's components resolve libmpi's symbols globally: load it RTLD_GLOBAL.
        // SAFETY: loading runs libmpi's initialisers, as linking it would.
        let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| Error(format!("cannot load {path} (OpenMPI): {e}")))?;
        // SAFETY: the signatures are MPI's C bindings with OpenMPI's pointer handles.
        let init: unsafe extern "C" fn(*mut c_int, *mut *mut *mut i8) -> c_int =
            unsafe { sym(&lib, "MPI_Init")? };
        // SAFETY: as above.
        let mut m = unsafe {
            Mpi {
                world: global(&lib, "ompi_mpi_comm_world")?,
                byte: global(&lib, "ompi_mpi_byte")?,
                long_long: global(&lib, "ompi_mpi_long_long_int")?,
                double: global(&lib, "ompi_mpi_double")?,
                op_sum: global(&lib, "ompi_mpi_op_sum")?,
                op_max: global(&lib, "ompi_mpi_op_max")?,
                op_min: global(&lib, "ompi_mpi_op_min")?,
                finalize: sym(&lib, "MPI_Finalize")?,
                comm_rank: sym(&lib, "MPI_Comm_rank")?,
                comm_size: sym(&lib, "MPI_Comm_size")?,
                bcast: sym(&lib, "MPI_Bcast")?,
                allreduce: sym(&lib, "MPI_Allreduce")?,
                barrier: sym(&lib, "MPI_Barrier")?,
                gather: sym(&lib, "MPI_Gather")?,
                abort: sym(&lib, "MPI_Abort")?,
                _lib: lib,
                rank: 0,
                size: 1,
            }
        };
        // SAFETY: MPI-2 allows NULL argc/argv.
        check("MPI_Init", unsafe {
            init(std::ptr::null_mut(), std::ptr::null_mut())
        })?;
        let (mut r, mut s): (c_int, c_int) = (0, 0);
        // SAFETY: valid handle and out pointers.
        check("MPI_Comm_rank", unsafe { (m.comm_rank)(m.world, &mut r) })?;
        // SAFETY: as above.
        check("MPI_Comm_size", unsafe { (m.comm_size)(m.world, &mut s) })?;
        m.rank = r.max(0) as usize;
        m.size = s.max(1) as usize;
        Ok(m)
    }

    pub fn bcast(&self, buf: &mut [u8], root: usize) -> Result<()> {
        // SAFETY: `buf` is valid for its length in bytes on every rank.
        let rc = unsafe {
            (self.bcast)(
                buf.as_mut_ptr().cast(),
                count(buf.len())?,
                self.byte,
                count(root)?,
                self.world,
            )
        };
        check("MPI_Bcast", rc)
    }

    pub fn barrier(&self) -> Result<()> {
        // SAFETY: valid communicator.
        check("MPI_Barrier", unsafe { (self.barrier)(self.world) })
    }

    pub fn sum_u64(&self, v: u64) -> Result<u64> {
        let send = i64::try_from(v).unwrap_or(i64::MAX);
        let mut out: i64 = 0;
        // SAFETY: one long long in and out.
        let rc = unsafe {
            (self.allreduce)(
                (&send as *const i64).cast(),
                (&mut out as *mut i64).cast(),
                1,
                self.long_long,
                self.op_sum,
                self.world,
            )
        };
        check("MPI_Allreduce", rc)?;
        Ok(out.max(0) as u64)
    }

    /// Combines a per-rank value the way `agg` says.
    pub fn combine(&self, v: f64, agg: Agg) -> Result<f64> {
        if agg == Agg::Rank0 {
            let mut b = v.to_le_bytes();
            self.bcast(&mut b, 0)?;
            return Ok(f64::from_le_bytes(b));
        }
        let op = match agg {
            Agg::Max => self.op_max,
            Agg::Min => self.op_min,
            _ => self.op_sum,
        };
        let mut out: f64 = 0.0;
        // SAFETY: one double in and out.
        let rc = unsafe {
            (self.allreduce)(
                (&v as *const f64).cast(),
                (&mut out as *mut f64).cast(),
                1,
                self.double,
                op,
                self.world,
            )
        };
        check("MPI_Allreduce", rc)?;
        Ok(if agg == Agg::Avg {
            out / self.size as f64
        } else {
            out
        })
    }

    /// Gathers `send.len()` bytes from every rank to `root` (the result is empty elsewhere).
    pub fn gather(&self, send: &[u8], root: usize) -> Result<Vec<u8>> {
        let mut out = vec![
            0u8;
            if self.rank == root {
                send.len() * self.size
            } else {
                0
            }
        ];
        let n = count(send.len())?;
        // SAFETY: `out` holds size * len bytes at the root; the others pass an unused pointer.
        let rc = unsafe {
            (self.gather)(
                send.as_ptr().cast(),
                n,
                self.byte,
                out.as_mut_ptr().cast(),
                n,
                self.byte,
                count(root)?,
                self.world,
            )
        };
        check("MPI_Gather", rc)?;
        Ok(out)
    }

    /// Ends every process of the job (used on fatal errors so peers do not hang).
    pub fn abort(&self, code: i32) {
        // SAFETY: valid communicator; does not return in practice.
        unsafe { (self.abort)(self.world, code) };
    }

    pub fn finalize(&self) -> Result<()> {
        // SAFETY: called once, after every other MPI call.
        check("MPI_Finalize", unsafe { (self.finalize)() })
    }
}
