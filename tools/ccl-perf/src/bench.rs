//! Setting up ranks (MPI, manual or single process), the size sweep, timing and checking.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use crate::cli::{Cli, Settings};
use crate::coll::{Coll, Counts};
use crate::dtype::Dtype;
use crate::gen::{self, Gen, RedOp, FILL_BYTE, PREMUL_SCALAR};
use crate::mem::{Cuda, Device, Graph, Mem};
use crate::mpi::{Agg, Mpi};
use crate::nccl::{Call, Comm, Nccl};
use crate::report::{self, JsonReport, Measure, Row, Summary};
use crate::{Error, Result};

/// How the processes of the job were started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchKind {
    Single,
    Mpi,
    Manual,
}

/// Which launch the environment asks for.
pub fn detect_launch() -> Result<LaunchKind> {
    let has = |k: &str| std::env::var_os(k).is_some();
    if has("OMPI_COMM_WORLD_SIZE") || has("PMI_SIZE") {
        return Ok(LaunchKind::Mpi);
    }
    if has("CCL_RANK") || has("CCL_NRANKS") {
        if !(has("CCL_RANK") && has("CCL_NRANKS")) {
            return Err(Error("set both CCL_RANK and CCL_NRANKS".into()));
        }
        if !has("NCCL_COMM_ID") {
            return Err(Error(
                "CCL_RANK/CCL_NRANKS need NCCL_COMM_ID=host:port".into(),
            ));
        }
        return Ok(LaunchKind::Manual);
    }
    Ok(LaunchKind::Single)
}

fn env_usize(keys: &[&str]) -> Option<usize> {
    keys.iter()
        .find_map(|k| std::env::var(k).ok().and_then(|v| v.trim().parse().ok()))
}

/// One rank driven by this process. Buffers are declared before the device so they are
/// freed while its context is still held.
struct Rank {
    send: Mem,
    recv: Mem,
    dev: Device,
    comm: Comm,
    rank: usize,
}

/// A buffer location: in the receive buffer or the send buffer, at a byte offset.
#[derive(Debug, Clone, Copy)]
struct Loc {
    in_recv: bool,
    off: usize,
}

impl Rank {
    fn mem(&self, l: Loc) -> &Mem {
        if l.in_recv {
            &self.recv
        } else {
            &self.send
        }
    }
}

/// Send and receive locations (nccl-tests' in-place layout is based on the receive buffer).
fn locs(c: &Counts, rank: usize, ts: usize, in_place: bool) -> (Loc, Loc) {
    if in_place {
        (
            Loc {
                in_recv: true,
                off: rank * c.send_ip_off * ts,
            },
            Loc {
                in_recv: true,
                off: rank * c.recv_ip_off * ts,
            },
        )
    } else {
        (
            Loc {
                in_recv: false,
                off: 0,
            },
            Loc {
                in_recv: true,
                off: 0,
            },
        )
    }
}

/// One operation at one size and placement.
#[derive(Clone, Copy)]
struct Job<'j> {
    coll: Coll,
    g: Gen,
    ops: &'j [i32],
    root: usize,
    c: Counts,
    in_place: bool,
}

pub struct Bench<'a> {
    nccl: Nccl,
    mpi: Option<&'a Mpi>,
    kind: LaunchKind,
    s: Settings,
    ranks: Vec<Rank>,
    nranks: usize,
    proc_rank: usize,
    nprocs: usize,
    version: i32,
    device_lines: Vec<String>,
    /// Inputs and results built once per generator for the sweep's largest size.
    prefixes: RefCell<gen::Prefixes>,
}

/// This process's rank among the processes, and their number.
fn process_rank(kind: LaunchKind, mpi: Option<&Mpi>) -> Result<(usize, usize)> {
    match kind {
        LaunchKind::Single => Ok((0, 1)),
        LaunchKind::Mpi => match mpi {
            Some(m) => Ok((m.rank, m.size)),
            None => Err(Error("MPI launch without MPI".into())),
        },
        LaunchKind::Manual => {
            let r = env_usize(&["CCL_RANK"]).ok_or_else(|| Error("bad CCL_RANK".into()))?;
            let n = env_usize(&["CCL_NRANKS"]).ok_or_else(|| Error("bad CCL_NRANKS".into()))?;
            if n == 0 || r >= n {
                return Err(Error(format!("CCL_RANK {r} outside CCL_NRANKS {n}")));
            }
            Ok((r, n))
        }
    }
}

/// The CUDA driver when buffers go to device memory: when a GPU is found, unless `--mem host`
/// or libccl is told to read every buffer as host memory (GPU buffers would make it fault).
fn cuda_for(cli: &Cli, s: &Settings) -> Result<Option<Rc<Cuda>>> {
    let host_backend = std::env::var("CCL_DEVICE").is_ok_and(|v| v == "host");
    if host_backend && cli.mem == "device" {
        return Err(Error(
            "--mem device with CCL_DEVICE=host: the library would read GPU buffers as host memory"
                .into(),
        ));
    }
    let cuda = if cli.mem == "host" || host_backend {
        None
    } else {
        Cuda::load()?.map(Rc::new)
    };
    if s.graph > 0 && cuda.is_none() {
        return Err(Error(
            "-G captures CUDA graphs: it needs a usable GPU and device memory".into(),
        ));
    }
    if cli.mem == "device" && cuda.is_none() {
        return Err(Error(
            "--mem device: no usable GPU (libcuda.so.1 / cuInit)".into(),
        ));
    }
    Ok(cuda)
}

/// The `g` devices of this process: GPUs from its local rank on (round robin), or host memory.
fn devices(cuda: Option<&Rc<Cuda>>, kind: LaunchKind, g: usize) -> Result<Vec<Device>> {
    let local = match kind {
        LaunchKind::Single => 0,
        LaunchKind::Mpi => env_usize(&[
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "MPI_LOCALRANKID",
            "PMI_LOCAL_RANK",
            "SLURM_LOCALID",
        ])
        .unwrap_or(0),
        LaunchKind::Manual => env_usize(&["CCL_LOCAL_RANK", "CCL_RANK"]).unwrap_or(0),
    };
    let mut devs = Vec::with_capacity(g);
    for j in 0..g {
        devs.push(match cuda {
            Some(c) => {
                if kind == LaunchKind::Single && g > c.count {
                    return Err(Error(format!("-g {g} but only {} GPUs", c.count)));
                }
                Device::cuda(c.clone(), (local * g + j) % c.count)?
            }
            None => Device::Host,
        });
    }
    Ok(devs)
}

/// One communicator per device: `ncclCommInitAll` in one process, else `ncclCommInitRank` with
/// the id rank 0 made (broadcast over MPI, or built from `NCCL_COMM_ID` by every process).
fn communicators(
    nccl: &Nccl,
    kind: LaunchKind,
    mpi: Option<&Mpi>,
    devs: &[Device],
    nranks: usize,
    proc_rank: usize,
) -> Result<Vec<Comm>> {
    let g = devs.len();
    if kind == LaunchKind::Single {
        return nccl.init_all(g);
    }
    let id = match (kind, mpi) {
        (LaunchKind::Mpi, Some(m)) => {
            let mut id = if m.rank == 0 {
                nccl.unique_id()?
            } else {
                crate::nccl::UniqueId { internal: [0; 128] }
            };
            m.bcast(&mut id.internal, 0)?;
            id
        }
        // With NCCL_COMM_ID set the id only carries that address: every process builds the
        // same one.
        _ => nccl.unique_id()?,
    };
    let mut comms = Vec::with_capacity(g);
    if g > 1 {
        nccl.group_start()?;
    }
    for (j, d) in devs.iter().enumerate() {
        d.make_current()?;
        comms.push(nccl.init_rank(nranks, id, proc_rank * g + j)?);
    }
    if g > 1 {
        nccl.group_end()?;
    }
    Ok(comms)
}

/// nccl-tests' "#  Rank .. Group .. Pid .. on host device" lines for this process's ranks.
fn device_lines(ranks: &[Rank]) -> Vec<String> {
    let host = hostname();
    let pid = std::process::id();
    ranks
        .iter()
        .map(|r| {
            format!(
                "#  Rank {:2} Group  0 Pid {pid:6} on {host:>10} {}",
                r.rank,
                r.dev.describe()
            )
        })
        .collect()
}

impl<'a> Bench<'a> {
    /// Loads the library, learns this process's ranks and devices, makes the communicators,
    /// streams and buffers, in that order (as nccl-tests' own setup does).
    pub fn setup(
        cli: &Cli,
        s: Settings,
        kind: LaunchKind,
        mpi: Option<&'a Mpi>,
    ) -> Result<Bench<'a>> {
        let nccl = Nccl::load(&cli.nccl_lib)?;
        let version = nccl.version()?;
        let (proc_rank, nprocs) = process_rank(kind, mpi)?;
        let g = s.ngpus;
        let nranks = nprocs * g;
        let cuda = cuda_for(cli, &s)?;
        let devs = devices(cuda.as_ref(), kind, g)?;
        let comms = communicators(&nccl, kind, mpi, &devs, nranks, proc_rank)?;
        let bytes = s.max_bytes.max(64);
        let mut ranks = Vec::with_capacity(g);
        for (j, (dev, comm)) in devs.into_iter().zip(comms).enumerate() {
            let want = proc_rank * g + j;
            let (n, r) = (nccl.count(comm)?, nccl.user_rank(comm)?);
            if n != nranks || r != want {
                return Err(Error(format!(
                    "communicator reports rank {r} of {n}, expected rank {want} of {nranks}"
                )));
            }
            let send = dev.alloc(bytes)?;
            let recv = dev.alloc(bytes)?;
            ranks.push(Rank {
                send,
                recv,
                dev,
                comm,
                rank: want,
            });
        }
        let device_lines = device_lines(&ranks);
        Ok(Bench {
            nccl,
            mpi,
            kind,
            s,
            ranks,
            nranks,
            proc_rank,
            nprocs,
            version,
            device_lines,
            prefixes: RefCell::default(),
        })
    }

    fn printer(&self) -> bool {
        self.proc_rank == 0
    }

    fn say(&self, line: &str) {
        if self.printer() {
            println!("{line}");
        }
    }

    /// Every process's device lines, in rank order (MPI gathers them; without MPI only this
    /// process's are known).
    fn all_device_lines(&self) -> Result<Vec<String>> {
        let mine = self.device_lines.join("\n");
        let Some(m) = self.mpi else {
            let mut v = self.device_lines.clone();
            if self.kind == LaunchKind::Manual && self.nprocs > 1 {
                v.push(format!(
                    "#  (ranks of the other {} processes are not listed without MPI)",
                    self.nprocs - 1
                ));
            }
            return Ok(v);
        };
        const SLOT: usize = 512;
        let width = SLOT * self.s.ngpus;
        let mut buf = mine.into_bytes();
        buf.resize(width, 0);
        let all = m.gather(&buf, 0)?;
        Ok(all
            .chunks(width)
            .flat_map(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                String::from_utf8_lossy(&c[..end])
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect())
    }

    fn header(&self) -> Result<()> {
        let lines = self.all_device_lines()?;
        let s = &self.s;
        let launch = match self.kind {
            LaunchKind::Single => "single process".to_string(),
            LaunchKind::Mpi => format!("mpi, {} processes", self.nprocs),
            LaunchKind::Manual => format!("CCL_RANK/NCCL_COMM_ID, {} processes", self.nprocs),
        };
        let mem = if self.ranks.iter().all(|r| r.dev.is_cuda()) {
            "device"
        } else {
            "host (NULL stream)"
        };
        self.say(&format!(
            "# NCCL version {}",
            report::version_string(self.version)
        ));
        self.say(&format!(
            "# ccl-perf {}: library {}, launch {launch}, {} ranks, memory {mem}",
            s.coll.name(),
            self.nccl.path,
            self.nranks
        ));
        let step = if s.step_factor > 1 {
            format!("{}(factor)", s.step_factor)
        } else {
            format!("{}(bytes)", s.step_bytes)
        };
        if !self.nccl.has_native(s.coll.name()) {
            self.say(&format!(
                "# note: the library has no nccl{} entry point; issued as grouped ncclSend/ncclRecv",
                match s.coll {
                    Coll::AlltoAll => "AlltoAll",
                    Coll::Gather => "Gather",
                    _ => "Scatter",
                }
            ));
        }
        self.say(&format!(
            "# nThread 1 nGpus {} minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} agg iters: 1 validation: {} graph: {}",
            s.ngpus, s.min_bytes, s.max_bytes, s.warmup, s.iters, u8::from(s.check), s.graph
        ));
        self.say("#");
        self.say("# Using devices");
        for l in lines {
            self.say(&l);
        }
        for l in report::column_header() {
            self.say(&l);
        }
        Ok(())
    }

    fn sync_all(&self) -> Result<()> {
        self.ranks.iter().try_for_each(|r| r.dev.sync())
    }

    fn barrier(&self) -> Result<()> {
        match self.mpi {
            Some(m) => m.barrier(),
            None => Ok(()),
        }
    }

    /// Issues the operation once on every local rank (grouped when there are several).
    fn issue_all(&self, j: &Job) -> Result<()> {
        let grouped = self.ranks.len() > 1;
        if grouped {
            self.nccl.group_start()?;
        }
        let ts = j.g.dtype.size();
        for (i, r) in self.ranks.iter().enumerate() {
            let (sl, rl) = locs(&j.c, r.rank, ts, j.in_place);
            let call = Call {
                send: r.mem(sl).at(sl.off),
                recv: r.mem(rl).at(rl.off),
                count: j.c.param,
                dtype: j.g.dtype.code(),
                op: j.ops.get(i).copied().unwrap_or(0),
                root: i32::try_from(j.root).unwrap_or(0),
                rank: r.rank,
                nranks: self.nranks,
                comm: r.comm,
                stream: r.dev.stream(),
            };
            // SAFETY: every buffer holds max_bytes >= the largest send/recv extent of any size
            // of the sweep, including the in-place offsets (see `Coll::counts`).
            unsafe { self.nccl.issue(j.coll, &call)? };
        }
        if grouped {
            self.nccl.group_end()?;
        }
        Ok(())
    }

    /// Counts at the sweep's largest size: what the cached inputs and results are built for.
    fn largest(&self, j: &Job) -> Counts {
        let size = self.s.sizes.iter().copied().max().unwrap_or(0);
        j.coll.counts(size, self.nranks, j.g.dtype.size())
    }

    /// Writes the inputs of the job's generator at every local rank's send location.
    fn write_inputs(&self, j: &Job) -> Result<()> {
        let ts = j.g.dtype.size();
        let mut p = self.prefixes.borrow_mut();
        let big = self.largest(j).send;
        p.prepare_inputs(&j.g, self.ranks.iter().map(|r| r.rank), j.c.send, big);
        for r in &self.ranks {
            let (sl, _) = locs(&j.c, r.rank, ts, j.in_place);
            let input = p
                .input(&j.g, r.rank, j.c.send)
                .ok_or_else(|| Error("ccl-perf: inputs were not prepared".into()))?;
            r.dev.write(r.mem(sl), sl.off, input)?;
        }
        Ok(())
    }

    /// Times one placement: warmup, then `iters` back to back; seconds per iteration,
    /// combined across processes. The timed inputs are zeros, not the check's values: no
    /// path in either library depends on the values, building them cost a 512 MiB sweep
    /// most of its time, and a check then never sees its own inputs' results left over
    /// from the timed run (a library serving stale data fails it).
    fn time(&self, j: &Job) -> Result<f64> {
        let ts = j.g.dtype.size();
        for r in &self.ranks {
            let (sl, _) = locs(&j.c, r.rank, ts, j.in_place);
            r.dev.fill(r.mem(sl), sl.off, j.c.send * ts, 0)?;
        }
        for _ in 0..self.s.warmup {
            self.issue_all(j)?;
        }
        self.sync_all()?;
        self.barrier()?;
        let (elapsed, rounds) = if self.s.graph > 0 && self.s.iters > 0 {
            // nccl-tests' -G: the timed iterations captured once, the graph launched G times.
            let graphs = self.capture_all(j, self.s.iters)?;
            self.barrier()?;
            let t0 = Instant::now();
            for _ in 0..self.s.graph {
                for (r, g) in self.ranks.iter().zip(&graphs) {
                    r.dev.launch(g)?;
                }
            }
            self.sync_all()?;
            (t0.elapsed(), self.s.graph)
        } else {
            let t0 = Instant::now();
            for _ in 0..self.s.iters {
                self.issue_all(j)?;
            }
            self.sync_all()?;
            (t0.elapsed(), 1)
        };
        let secs = if self.s.iters == 0 {
            0.0
        } else {
            elapsed.as_secs_f64() / f64::from(self.s.iters) / f64::from(rounds)
        };
        match self.mpi {
            Some(m) => m.combine(secs, self.s.agg),
            None => Ok(secs),
        }
    }

    /// `times` runs of `j` captured into one graph per local rank, instantiated once every
    /// capture has ended (one thread capturing several ranks' streams, `-g`).
    fn capture_all(&self, j: &Job, times: u32) -> Result<Vec<Graph>> {
        for r in &self.ranks {
            r.dev.begin_capture()?;
        }
        let issued = (0..times).try_for_each(|_| self.issue_all(j));
        let mut graphs = self
            .ranks
            .iter()
            .map(|r| r.dev.end_capture())
            .collect::<Result<Vec<_>>>()?;
        issued?;
        for g in &mut graphs {
            g.instantiate()?;
        }
        Ok(graphs)
    }

    /// One run on fresh inputs (captured and launched as a graph under -G); returns the wrong
    /// elements of this process's ranks.
    fn check(&self, j: &Job, label: &str) -> Result<u64> {
        let (g, c) = (&j.g, &j.c);
        let ts = g.dtype.size();
        for r in &self.ranks {
            let (sl, rl) = locs(c, r.rank, ts, j.in_place);
            let mut end = rl.off + c.recv * ts;
            if j.in_place {
                end = end.max(sl.off + c.send * ts);
            }
            r.dev.fill(&r.recv, 0, end, FILL_BYTE)?;
        }
        self.write_inputs(j)?;
        if self.s.graph > 0 {
            // -G checks what the timed runs do: the operation captured into a graph, launched.
            self.capture_all(j, 1)?
                .iter()
                .zip(&self.ranks)
                .try_for_each(|(g, r)| r.dev.launch(g))?;
        } else {
            self.issue_all(j)?;
        }
        self.sync_all()?;
        let big = self.largest(j);
        let mut p = self.prefixes.borrow_mut();
        let len = j.coll.reduced_len(c);
        p.prepare_reduced(g, len, j.coll.reduced_len(&big));
        if len == 0 {
            // Outputs copy inputs: every rank's, also those of other processes.
            p.prepare_inputs(g, 0..self.nranks, c.send, big.send);
        }
        let reduced = p.reduced(g, len).unwrap_or(&[]);
        let inputs = p.inputs(g, c.send);
        let tol = g.tolerance();
        let mut wrong = 0;
        for r in &self.ranks {
            let Some(want) = gen::expected(j.coll, g, r.rank, j.root, c, reduced, &inputs) else {
                continue;
            };
            let (_, rl) = locs(c, r.rank, ts, j.in_place);
            let got = r.dev.read(&r.recv, rl.off, c.recv * ts)?;
            let res = gen::compare(g.dtype, &got, &want, tol);
            if let Some((i, gw, ww)) = res.first {
                eprintln!(
                    "ccl-perf: rank {} {label}: {} wrong elements, first at index {i}: got {:#x} ({}) expected {:#x} ({})",
                    r.rank,
                    res.wrong,
                    gw,
                    g.dtype.decode(&gw.to_le_bytes()),
                    ww,
                    g.dtype.decode(&ww.to_le_bytes()),
                );
            }
            wrong += res.wrong;
        }
        Ok(wrong)
    }

    fn async_errors(&self) -> Result<()> {
        self.ranks
            .iter()
            .try_for_each(|r| self.nccl.async_error(r.comm))
    }

    /// Creates the PreMulSum op on every local rank (or returns the built-in code).
    fn make_ops(&self, op: Option<RedOp>, dt: Dtype) -> Result<(Vec<i32>, bool)> {
        match op {
            Some(RedOp::PreMulSum) => {
                let mut v = Vec::with_capacity(self.ranks.len());
                for r in &self.ranks {
                    let mut scalar = [0u8; 8];
                    dt.encode(PREMUL_SCALAR, &mut scalar);
                    v.push(self.nccl.create_premulsum(&mut scalar, dt.code(), r.comm)?);
                }
                Ok((v, true))
            }
            Some(o) => Ok((vec![o.builtin_code().unwrap_or(0); self.ranks.len()], false)),
            None => Ok((vec![0; self.ranks.len()], false)),
        }
    }

    /// The whole sweep. Returns the JSON document and whether every check passed.
    pub fn run(&self) -> Result<(JsonReport, u64)> {
        self.header()?;
        let s = &self.s;
        let coll = s.coll;
        let n = self.nranks;
        let redops: Vec<Option<RedOp>> = if coll.has_redop() {
            s.redops.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        let roots: Vec<Option<usize>> = if coll.has_root() {
            match s.root {
                Some(r) if r >= n => return Err(Error(format!("root {r} outside {n} ranks"))),
                Some(r) => vec![Some(r)],
                None => (0..n).map(Some).collect(),
            }
        } else if coll == crate::coll::Coll::SendRecv {
            // `-r K`: the sendrecv's step (`coll::sendrecv_shift`).
            vec![s.root.filter(|&r| r < n)]
        } else {
            vec![None]
        };
        let mut rows = Vec::new();
        let (mut bw_sum, mut bw_count, mut wrong_total) = (0.0, 0usize, 0u64);
        for &dt in &s.dtypes {
            for &op in &redops {
                let (ops, created) = self.make_ops(op, dt)?;
                for &root in &roots {
                    let root_i = root.unwrap_or(0);
                    for &size in &s.sizes {
                        let c = coll.counts(size, n, dt.size());
                        let bytes = coll.algbw_bytes(c.param, n, dt.size());
                        let factor = coll.busbw_factor(n);
                        let mut m = Vec::with_capacity(2);
                        for in_place in [false, true] {
                            let g = Gen {
                                dtype: dt,
                                op,
                                nranks: n,
                                seed: op_seed(op),
                            };
                            let job = Job {
                                coll,
                                g,
                                ops: &ops,
                                root: root_i,
                                c,
                                in_place,
                            };
                            let secs = self.time(&job)?;
                            let wrong = if s.check && (!in_place || coll.checks_in_place()) {
                                let label = format!(
                                    "{} {} {} root {} size {size} {}",
                                    coll.name(),
                                    dt.name(),
                                    op.map_or("none", RedOp::name),
                                    root.map_or(-1, |r| r as i64),
                                    if in_place { "in-place" } else { "out-of-place" }
                                );
                                let w = self.check(&job, &label)?;
                                Some(match self.mpi {
                                    Some(mp) => mp.sum_u64(w)?,
                                    None => w,
                                })
                            } else {
                                None
                            };
                            self.async_errors()?;
                            let me = Measure::new(bytes, secs, factor, wrong);
                            bw_sum += me.busbw;
                            bw_count += 1;
                            wrong_total += wrong.unwrap_or(0);
                            m.push(me);
                        }
                        let row = Row {
                            size: bytes,
                            count: c.param,
                            dtype: dt.name(),
                            redop: op.map_or("none", RedOp::name),
                            root: root.map_or(-1, |r| r as i64),
                            out_of_place: m[0],
                            in_place: m[1],
                        };
                        self.say(&row.line());
                        rows.push(row);
                    }
                }
                if created {
                    for (r, &o) in self.ranks.iter().zip(&ops) {
                        self.nccl.destroy_redop(o, r.comm)?;
                    }
                }
            }
        }
        let avg = if bw_count > 0 {
            bw_sum / bw_count as f64
        } else {
            0.0
        };
        for l in report::footer(wrong_total, avg) {
            self.say(&l);
        }
        let doc = JsonReport {
            tool: "ccl-perf",
            op: coll.name(),
            nccl_version: report::version_string(self.version),
            nccl_version_code: self.version,
            library: self.nccl.path.clone(),
            launch: format!("{:?}", self.kind).to_lowercase(),
            memory: if self.ranks.iter().all(|r| r.dev.is_cuda()) {
                "device"
            } else {
                "host"
            },
            nranks: n,
            nprocs: self.nprocs,
            gpus_per_proc: s.ngpus,
            iters: s.iters,
            warmup_iters: s.warmup,
            check: s.check,
            time_aggregation: match s.agg {
                Agg::Rank0 => "rank0",
                Agg::Avg => "avg",
                Agg::Min => "min",
                Agg::Max => "max",
            },
            summary: Summary {
                rows: rows.len(),
                wrong_total,
                avg_busbw: avg,
                ok: wrong_total == 0,
            },
            rows,
        };
        Ok((doc, wrong_total))
    }

    pub fn is_printer(&self) -> bool {
        self.printer()
    }

    /// After a failed operation: aborts every communicator of this process (a failed one may
    /// still have operations queued or waiting on peers that are gone), printing to stderr
    /// how long each abort took, which the failover benchmark reads (`tests/bench`).
    pub fn abort_all(&mut self) {
        for r in self.ranks.drain(..) {
            let t = std::time::Instant::now();
            let res = self.nccl.abort(r.comm);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            match res {
                Ok(()) => eprintln!(
                    "ccl-perf: rank {}: ncclCommAbort returned in {ms:.1} ms",
                    r.rank
                ),
                Err(e) => eprintln!(
                    "ccl-perf: rank {}: ncclCommAbort failed after {ms:.1} ms: {e}",
                    r.rank
                ),
            }
        }
    }

    /// Destroys the communicators (buffers and devices go when `self` drops).
    pub fn teardown(&mut self) -> Result<()> {
        self.sync_all()?;
        for r in &self.ranks {
            self.nccl.destroy(r.comm)?;
        }
        Ok(())
    }
}

/// Distinct inputs per reduction operator.
fn op_seed(op: Option<RedOp>) -> u64 {
    let i = op.map_or(0, |o| {
        RedOp::ALL.iter().position(|&x| x == o).unwrap_or(0) + 1
    });
    (i as u64) * 16
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer holds 256 bytes; gethostname writes at most len bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
