//! Command line (nccl-tests option letters and meanings).

use std::path::PathBuf;

use clap::Parser;

use crate::coll::Coll;
use crate::dtype::Dtype;
use crate::gen::RedOp;
use crate::mpi::Agg;
use crate::{Error, Result};

const AFTER_HELP: &str = "\
OPS
  all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter

SIZES (nccl-tests conventions)
  A size S (bytes) becomes element counts per operation:
    all_reduce, broadcast, reduce, sendrecv: count = S / sizeof(type) on every rank;
    all_gather, gather: each rank sends S / (nranks * sizeof) elements, S is the size of the
      gathered receive buffer; reduce_scatter, scatter: S is the size of the full send
      buffer, each rank receives S / (nranks * sizeof); alltoall: S is each rank's send (and
      receive) buffer, count = S / (nranks * sizeof) per peer.
  The size column prints the full buffer size (nranks * count * sizeof for the split ops),
  the count column the count passed to nccl. No 16-byte rounding of split counts.
  algbw = size / time (GB/s = 1e9 B/s). busbw = algbw * factor: all_reduce 2(n-1)/n;
  all_gather, reduce_scatter, alltoall, gather, scatter (n-1)/n; broadcast, reduce,
  sendrecv 1. Time = mean over -n iterations, combined across ranks by -a (default: max).
  Suffixes K, M, G are powers of 1024.

IN PLACE
  all_gather / gather: sendbuff = recvbuff + rank*count; reduce_scatter / scatter:
  recvbuff = sendbuff + rank*count; every other op: sendbuff == recvbuff.
  sendrecv: rank r sends to (r+1)%n and receives from (r-1+n)%n in one group; -r K (K > 0)
    makes the step K: to (r+K)%n, from (r-K+n)%n.
  alltoall and sendrecv in place are timed but not checked (#wrong N/A), as in nccl-tests:
  NCCL does not support aliased buffers for them.

CHECK (-c 1)
  After the timed iterations, one more run on fresh inputs; every output element is
  compared bit-exactly with a host reference. Inputs are small integers chosen so any
  summation order is exact in the type (fp8, half and bfloat16 included). avg on floating
  types with a non-power-of-two rank count allows a relative error of (n+2) * 2^-p (p =
  significand bits, i.e. about (n+2)/2 ulp); integer avg truncates toward zero.
  premulsum (printed 'mulsum') uses ncclRedOpCreatePreMulSum with host-immediate scalar 2.

LAUNCH
  mpirun -np N ccl-perf ...    OpenMPI (libmpi.so.40, loaded at run time); the unique id
                               travels by MPI_Bcast; wrong counts are summed over ranks.
  CCL_RANK=r CCL_NRANKS=n NCCL_COMM_ID=host:port ccl-perf ...
                               one process per rank without MPI (every process calls
                               ncclGetUniqueId, which carries NCCL_COMM_ID); rank 0 prints;
                               each process checks and exits on its own results only.
  ccl-perf -g N ...            one process, ncclCommInitAll over N ranks, every operation
                               issued for all N inside ncclGroupStart/End.
  With -g G under mpirun or CCL_RANK, each process drives G ranks (rank = proc*G + i).
  Buffers are device memory when libcuda.so.1 finds a GPU (device = local rank % count),
  else host memory with a NULL stream (--mem host, or libccl's CCL_DEVICE=host, forces it).

PARAMETERS
  ccl-perf --env [--nccl-lib PATH] lists every parameter of the loaded library, its value and
  its meaning (ncclParamDumpAll, the NCCL 2.30 parameter API; libccl implements it).

EXIT STATUS
  0 all good; 1 wrong elements; 2 an nccl / MPI / CUDA error or bad arguments.";

/// nccl-tests style benchmark over any libnccl.so.2 (libccl or NVIDIA NCCL).
#[derive(Debug, Parser)]
#[command(name = "ccl-perf", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Operation to measure (see OPS).
    #[arg(value_parser = parse_coll)]
    pub op: Coll,
    /// Minimum size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "32M", value_parser = parse_size)]
    pub min_bytes: usize,
    /// Maximum size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = parse_size)]
    pub max_bytes: usize,
    /// Multiply the size by this factor at each step (wins over -i when above 1).
    #[arg(short = 'f', long = "stepfactor")]
    pub step_factor: Option<usize>,
    /// Add this many bytes at each step.
    #[arg(short = 'i', long = "stepbytes", value_parser = parse_size)]
    pub step_bytes: Option<usize>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: u32,
    /// Warmup iterations per size (not timed).
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Capture each size's timed iterations in a CUDA graph and launch it this many times
    /// (nccl-tests' -G; 0: no graph; needs device memory).
    #[arg(short = 'G', long = "cudagraph", default_value_t = 0)]
    pub graph_launches: u32,
    /// Check results: 0 or 1.
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u32,
    /// Data type(s): a name, a comma list, or all.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub dtype: String,
    /// Reduction op(s): sum prod max min avg premulsum, a comma list, or all.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub redop: String,
    /// Root rank, or all.
    #[arg(short = 'r', long = "root", default_value = "0")]
    pub root: String,
    /// GPUs (ranks) per process.
    #[arg(short = 'g', long = "ngpus", default_value_t = 1)]
    pub ngpus: usize,
    /// Time across ranks: 0 rank 0, 1 average, 2 minimum, 3 maximum.
    #[arg(short = 'a', long = "average", default_value_t = 3)]
    pub average: u32,
    /// Write every row and a summary as JSON (rank 0).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Library to load instead of the plain soname libnccl.so.2.
    #[arg(long = "nccl-lib", default_value = "libnccl.so.2")]
    pub nccl_lib: String,
    /// OpenMPI library used under mpirun.
    #[arg(long = "mpi-lib", default_value = "libmpi.so.40")]
    pub mpi_lib: String,
    /// Buffer memory: auto (device when a GPU is found), host, device.
    #[arg(long, default_value = "auto", value_parser = ["auto", "host", "device"])]
    pub mem: String,
}

fn parse_coll(s: &str) -> std::result::Result<Coll, String> {
    Coll::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Coll::ALL.iter().map(|c| c.name()).collect();
        format!("unknown op '{s}' (one of: {})", names.join(" "))
    })
}

/// `8`, `64K`, `1M`, `2G` (powers of 1024).
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1usize << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = num.parse().map_err(|_| format!("bad size '{s}'"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("size '{s}' too large"))
}

/// A comma-separated list, or `all`.
fn parse_list<T: Copy>(
    s: &str,
    all: &[T],
    one: fn(&str) -> Option<T>,
    what: &str,
) -> Result<Vec<T>> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    s.split(',')
        .map(|p| one(p.trim()).ok_or_else(|| Error(format!("unknown {what} '{p}'"))))
        .collect()
}

/// The validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub coll: Coll,
    pub sizes: Vec<usize>,
    pub min_bytes: usize,
    pub max_bytes: usize,
    pub step_factor: usize,
    pub step_bytes: usize,
    pub iters: u32,
    pub warmup: u32,
    /// Graph launches of the captured timed iterations (0: none).
    pub graph: u32,
    pub check: bool,
    pub dtypes: Vec<Dtype>,
    pub redops: Vec<RedOp>,
    /// None = all roots.
    pub root: Option<usize>,
    pub ngpus: usize,
    pub agg: Agg,
}

impl Cli {
    pub fn settings(&self) -> Result<Settings> {
        if self.min_bytes > self.max_bytes {
            return Err(Error(format!(
                "minimum size {} is above maximum size {}",
                self.min_bytes, self.max_bytes
            )));
        }
        if self.ngpus == 0 {
            return Err(Error("-g must be at least 1".into()));
        }
        if self.check > 1 {
            return Err(Error("-c takes 0 or 1".into()));
        }
        let step_factor = self.step_factor.unwrap_or(1);
        let step_bytes = self.step_bytes.unwrap_or(1 << 20);
        if step_factor <= 1 && step_bytes == 0 && self.min_bytes < self.max_bytes {
            return Err(Error(
                "-i 0 with -f 1 never reaches the maximum size".into(),
            ));
        }
        let agg = match self.average {
            0 => Agg::Rank0,
            1 => Agg::Avg,
            2 => Agg::Min,
            3 => Agg::Max,
            a => return Err(Error(format!("-a takes 0..3, not {a}"))),
        };
        let root = if self.root.eq_ignore_ascii_case("all") {
            None
        } else {
            Some(
                self.root
                    .parse()
                    .map_err(|_| Error(format!("bad root '{}'", self.root)))?,
            )
        };
        Ok(Settings {
            coll: self.op,
            sizes: crate::coll::sweep(self.min_bytes, self.max_bytes, step_factor, step_bytes),
            min_bytes: self.min_bytes,
            max_bytes: self.max_bytes,
            step_factor,
            step_bytes,
            iters: self.iters,
            warmup: self.warmup,
            graph: self.graph_launches,
            check: self.check == 1,
            dtypes: parse_list(&self.dtype, &Dtype::ALL, Dtype::parse, "data type")?,
            redops: parse_list(&self.redop, &RedOp::ALL, RedOp::parse, "reduction op")?,
            root,
            ngpus: self.ngpus,
            agg,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("1T").is_err());
    }

    #[test]
    fn nccl_tests_options() {
        let cli = Cli::try_parse_from([
            "ccl-perf",
            "all_reduce",
            "-b",
            "8",
            "-e",
            "64M",
            "-f",
            "4",
            "-d",
            "all",
            "-o",
            "all",
            "-c",
            "0",
            "-g",
            "2",
            "-n",
            "3",
            "-w",
            "1",
        ])
        .unwrap();
        let s = cli.settings().unwrap();
        assert_eq!(s.sizes.len(), 12);
        assert_eq!(s.dtypes.len(), 12);
        assert_eq!(s.redops.len(), 6);
        assert!(!s.check);
        assert_eq!(s.ngpus, 2);
        let cli =
            Cli::try_parse_from(["ccl-perf", "broadcast", "-r", "all", "-d", "half,bf16"]).unwrap();
        let s = cli.settings().unwrap();
        assert_eq!(s.root, None);
        assert_eq!(s.dtypes, vec![Dtype::Half, Dtype::Bfloat16]);
        assert_eq!(s.sizes, vec![32 << 20]);
        assert!(Cli::try_parse_from(["ccl-perf", "allreduce_x"]).is_err());
        let bad = Cli::try_parse_from(["ccl-perf", "reduce", "-o", "xor"]).unwrap();
        assert!(bad.settings().is_err());
    }
}
