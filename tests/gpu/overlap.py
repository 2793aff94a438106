"""A bf16 GEMM loop and a 256 MiB collective loop, alone and at once, on every rank.

Run under torchrun with 2 ranks (the library under test is chosen outside, by LD_PRELOAD):

    python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/overlap.py <label>

For each collective (sendrecv, alltoall, all_gather; nccl-tests byte counts: sendrecv 256 MiB
sent by every rank, alltoall 256 MiB in and out, all_gather 256 MiB of output; also
all_gather_inplace, reduce_scatter (nccl-tests' size: the whole input), and raw_push --
copies with no library, see Coll -- on request) it measures
  (a) the GEMM loop alone on a compute stream (ms per GEMM, TFLOP/s),
  (b) the collective loop alone on a comm stream (busbw GB/s, nccl-tests formulas),
  (c) both loops at once, each sized to run OVERLAP_SECONDS at its rate alone and enqueued
      by its own host thread (OVERLAP_ENQUEUE=interleave: one thread alternating in
      proportion to the rates alone). Every iteration records a CUDA event, and each loop's
      rate is taken only from the iterations that lie wholly inside the window where both
      loops ran (less 5% at each edge), so neither figure includes time when the other loop
      was idle.
Rank 0 prints one line per collective:

    OVERLAP <label> <coll> gemm_alone_ms=.. gemm_overlap_ms=.. gemm_slowdown_pct=..
            coll_alone_busbw=.. coll_overlap_busbw=.. coll_slowdown_pct=..

(rank 0's own figures) and writes every rank's figures to $CCL_BENCH_OUT/overlap_<label>.json
when that is set. Env: OVERLAP_COLLS (names, space separated), OVERLAP_BYTES (default 256 MiB),
OVERLAP_SECONDS (length of each timed loop, default 1.5), OVERLAP_GEMM_N (default 8192),
OVERLAP_TRACE_DIR (a CUPTI trace of the overlapped loops of OVERLAP_TRACE_COLLS, default
sendrecv, per rank: tests/megatron/trace_gaps.py reads it).
"""
import ctypes
import json
import math
import os
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

MIB = 1 << 20
# OVERLAP_HOST_TIMES=1: host time of the parts of a send/receive call, over the whole run.
SPLITS = {} if os.environ.get("OVERLAP_HOST_TIMES") == "1" else None


def nccl_version():
    try:
        lib = ctypes.CDLL("libnccl.so.2")
        v = ctypes.c_int(0)
        lib.ncclGetVersion(ctypes.byref(v))
        return v.value
    except Exception as e:  # noqa: BLE001 - only a log line depends on it
        return f"unknown ({e})"


def log(rank, msg):
    if rank == 0:
        print(msg, flush=True)


class Coll:
    """One collective over pre-allocated buffers; `bytes` and `factor` follow nccl-tests."""

    def __init__(self, name, nbytes, rank, world, dev):
        self.name = name
        n = nbytes // 2  # bf16 elements
        peer_next, peer_prev = (rank + 1) % world, (rank - 1) % world
        dt = torch.bfloat16
        if name == "sendrecv":
            self.send = torch.full((n,), float(rank + 1), dtype=dt, device=dev)
            self.recv = torch.empty(n, dtype=dt, device=dev)
            self.bytes, self.factor = n * 2, 1.0

            def fn():
                ops = [dist.P2POp(dist.isend, self.send, peer_next), dist.P2POp(dist.irecv, self.recv, peer_prev)]
                t0 = time.perf_counter()
                works = dist.batch_isend_irecv(ops)
                t1 = time.perf_counter()
                for w in works:
                    w.wait()
                if SPLITS is not None:
                    SPLITS.setdefault("batch_isend_irecv", []).append((t1 - t0) * 1e6)
                    SPLITS.setdefault("wait", []).append((time.perf_counter() - t1) * 1e6)

        elif name == "raw_push":
            # No library: each rank pushes its buffer into the next rank's receive buffer,
            # mapped into this process's own context through CUDA IPC (as libccl maps it), with
            # one cuMemcpyAsync per call on the comm stream, unsynchronized between the ranks.
            # What the GEMM loses beside copies alone in this harness's two processes
            # (sendrecv's bytes and formula).
            cu = ctypes.CDLL("libcuda.so.1")

            class Handle(ctypes.Structure):
                _fields_ = [("reserved", ctypes.c_char * 64)]

            cu.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(Handle), ctypes.c_uint64]
            cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), Handle, ctypes.c_uint]
            cu.cuMemGetAddressRange_v2.argtypes = [
                ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
            cu.cuMemcpyAsync.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
            self.send = torch.full((n,), float(rank + 1), dtype=dt, device=dev)
            self.recv = torch.empty(n, dtype=dt, device=dev)
            self.bytes, self.factor = n * 2, 1.0
            base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
            assert cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), self.recv.data_ptr()) == 0
            h = Handle()
            assert cu.cuIpcGetMemHandle(ctypes.byref(h), base.value) == 0
            every = [None] * world
            dist.all_gather_object(every, (ctypes.string_at(ctypes.addressof(h), 64), self.recv.data_ptr() - base.value))
            raw, off = every[peer_next]
            peer = Handle()
            ctypes.memmove(ctypes.addressof(peer), raw, 64)
            mapped = ctypes.c_uint64(0)
            assert cu.cuIpcOpenMemHandle_v2(ctypes.byref(mapped), peer, 1) == 0
            dst, src, nb = mapped.value + off, self.send.data_ptr(), n * 2
            torch.cuda.synchronize()
            dist.barrier()

            def fn():
                r = cu.cuMemcpyAsync(dst, src, nb, torch.cuda.current_stream().cuda_stream)
                assert r == 0, r

        elif name == "alltoall":
            n -= n % world
            self.send = torch.full((n,), float(rank + 1), dtype=dt, device=dev)
            self.recv = torch.empty(n, dtype=dt, device=dev)
            self.bytes, self.factor = n * 2, (world - 1) / world

            def fn():
                dist.all_to_all_single(self.recv, self.send)

        elif name == "all_gather":
            per = n // world
            self.send = torch.full((per,), float(rank + 1), dtype=dt, device=dev)
            self.recv = torch.empty(per * world, dtype=dt, device=dev)
            self.bytes, self.factor = per * world * 2, (world - 1) / world

            def fn():
                dist.all_gather_into_tensor(self.recv, self.send)

        elif name == "all_gather_inplace":
            # The own block already in place: no local copy, only the exchange (tells whether
            # the out-of-place one loses its bandwidth beside a GEMM to the local copy).
            per = n // world
            self.recv = torch.full((per * world,), float(rank + 1), dtype=dt, device=dev)
            self.send = self.recv[rank * per:(rank + 1) * per]
            self.bytes, self.factor = per * world * 2, (world - 1) / world

            def fn():
                dist.all_gather_into_tensor(self.recv, self.send)

        elif name == "reduce_scatter":
            # nccl-tests' size is the whole input (every rank's part), as for all_gather's output.
            per = n // world
            self.send = torch.full((per * world,), float(rank + 1), dtype=dt, device=dev)
            self.recv = torch.empty(per, dtype=dt, device=dev)
            self.bytes, self.factor = per * world * 2, (world - 1) / world

            def fn():
                dist.reduce_scatter_tensor(self.recv, self.send)

        else:
            raise ValueError(
                f"unknown collective {name!r} (sendrecv, alltoall, all_gather, all_gather_inplace, "
                "reduce_scatter, raw_push)"
            )
        self.fn = fn

    def busbw(self, ms):
        """GB/s (1e9) as nccl-tests reports it, for one iteration of `ms` milliseconds."""
        if not ms or not math.isfinite(ms):
            return float("nan")
        return self.bytes / (ms * 1e-3) / 1e9 * self.factor


def time_loop(stream, fn, n):
    """Milliseconds per iteration of `n` calls of `fn` issued on `stream` (stream idle first)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        for _ in range(n):
            fn()
        end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def agree_max(vals, dev):
    """The largest of each value over all ranks (so both ranks run the same loop counts)."""
    t = torch.tensor(vals, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def phase_sync():
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()


def window_rate(t0, ends, ws, we):
    """ms per iteration over the iterations that start at or after `ws` and end by `we`."""
    starts = [t0] + ends[:-1]
    idx = [i for i in range(len(ends)) if starts[i] >= ws and ends[i] <= we]
    if len(idx) < 2:
        return float("nan"), len(idx)
    return (ends[idx[-1]] - starts[idx[0]]) / len(idx), len(idx)


def overlapped(dev, gemm_stream, comm_stream, gemm, coll, gemm_ms, coll_ms, ng, nc):
    """Both loops at once; returns (gemm ms/iter, coll ms/iter, details).

    By default (OVERLAP_ENQUEUE=threads) each loop is enqueued by its own host thread (torch
    drops the GIL in kernel launches and in c10d calls), so a collective whose enqueue blocks
    the host cannot starve the GEMM stream. OVERLAP_ENQUEUE=interleave enqueues both from one
    thread, alternating in proportion to the rates measured alone.
    """
    mode = os.environ.get("OVERLAP_ENQUEUE", "threads")
    ref = torch.cuda.Event(enable_timing=True)
    g0, c0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g_ev = [torch.cuda.Event(enable_timing=True) for _ in range(ng)]
    c_ev = [torch.cuda.Event(enable_timing=True) for _ in range(nc)]
    # torch creates an event's CUDA event in its first record(), and cudaEventCreate waits
    # 0.6 ms for a driver lock that another thread's launch holds while it waits for space on
    # its full queue (tests/gpu/event_create_probe.py and driver_lock_probe.cu, 2026-11-23:
    # a fresh Event.record() 1.58 ms at the median beside the GEMM thread, a reused one 40 us).
    # Created here, before the loops, so that neither loop measures the harness's own events.
    # OVERLAP_LAZY_EVENTS=1 keeps the lazy creation (as earlier versions of this script did,
    # to compare with their figures).
    if os.environ.get("OVERLAP_LAZY_EVENTS") != "1":
        for e in g_ev + c_ev:
            e.record()
    torch.cuda.synchronize()
    ref.record()
    gemm_stream.wait_event(ref)
    comm_stream.wait_event(ref)
    with torch.cuda.stream(gemm_stream):
        g0.record()
    with torch.cuda.stream(comm_stream):
        c0.record()
    host = {}
    if mode == "interleave":
        gi = ci = 0
        gv = cv = 0.0  # host-side virtual clocks at the rates measured alone
        host_t = time.perf_counter()
        while gi < ng or ci < nc:
            if ci >= nc or (gi < ng and gv <= cv):
                with torch.cuda.stream(gemm_stream):
                    gemm()
                    g_ev[gi].record()
                gi += 1
                gv += gemm_ms
            else:
                with torch.cuda.stream(comm_stream):
                    coll()
                    c_ev[ci].record()
                ci += 1
                cv += coll_ms
        host["gemm"] = host["coll"] = (time.perf_counter() - host_t) * 1e3
    else:
        go = threading.Barrier(2)
        errors = []
        # OVERLAP_HOST_TIMES=1: each loop's host time per call, and a third thread that sleeps
        # 100 us at a time and records how late it wakes (how long a Python thread waits for the
        # interpreter lock while the two loops run), as percentiles in the details.
        per_call = {} if os.environ.get("OVERLAP_HOST_TIMES") == "1" else None
        probe_stop = threading.Event()

        def gil_probe():
            late = per_call.setdefault("gil_probe", [])
            while not probe_stop.is_set():
                tp = time.perf_counter()
                time.sleep(100e-6)
                late.append((time.perf_counter() - tp) * 1e6 - 100.0)

        def loop(key, stream, fn, evs):
            try:
                torch.cuda.set_device(dev)
                with torch.cuda.stream(stream):
                    go.wait()
                    t = time.perf_counter()
                    if per_call is None:
                        for e in evs:
                            fn()
                            e.record()
                    else:
                        calls = per_call.setdefault(key, [])
                        records = per_call.setdefault(key + "_record", [])
                        for e in evs:
                            tc = time.perf_counter()
                            fn()
                            tr = time.perf_counter()
                            e.record()
                            calls.append((tr - tc) * 1e6)
                            records.append((time.perf_counter() - tr) * 1e6)
                    host[key] = (time.perf_counter() - t) * 1e3
            except BaseException as e:  # noqa: BLE001 - raised again in the caller
                errors.append(e)
                go.abort()

        th = [
            threading.Thread(target=loop, args=("gemm", gemm_stream, gemm, g_ev)),
            threading.Thread(target=loop, args=("coll", comm_stream, coll, c_ev)),
        ]
        if per_call is not None:
            probe = threading.Thread(target=gil_probe)
            probe.start()
        for x in th:
            x.start()
        for x in th:
            x.join()
        if per_call is not None:
            probe_stop.set()
            probe.join()
            for k, v in per_call.items():
                v.sort()
                if v:
                    host[f"{k}_us_pcts"] = [round(v[min(len(v) - 1, int(q * len(v)))], 1) for q in (0.5, 0.9, 0.99)] + [
                        round(v[-1], 1), len(v)]
        if errors:
            raise errors[0]
    torch.cuda.synchronize()
    gt0, ct0 = ref.elapsed_time(g0), ref.elapsed_time(c0)
    g_ends = [ref.elapsed_time(e) for e in g_ev]
    c_ends = [ref.elapsed_time(e) for e in c_ev]
    ws, we = max(gt0, ct0), min(g_ends[-1], c_ends[-1])
    margin = 0.05 * max(we - ws, 0.0)
    ws, we = ws + margin, we - margin
    g_ms, g_n = window_rate(gt0, g_ends, ws, we)
    c_ms, c_n = window_rate(ct0, c_ends, ws, we)
    details = {
        "enqueue": mode,
        "window_ms": we - ws,
        "gemm_loop_ms": g_ends[-1] - gt0,
        "coll_loop_ms": c_ends[-1] - ct0,
        "gemm_iters_in_window": g_n,
        "coll_iters_in_window": c_n,
        "gemm_iters": ng,
        "coll_iters": nc,
        "gemm_host_enqueue_ms": host.get("gemm", float("nan")),
        "coll_host_enqueue_ms": host.get("coll", float("nan")),
    }
    # Per-call host times (OVERLAP_HOST_TIMES=1): [median, 90th, 99th, max, calls] in us.
    details.update({k: v for k, v in host.items() if k.endswith("_us_pcts")})
    return g_ms, c_ms, details


def bench(name, args, rank, world, dev, gemm_stream, comm_stream, gemm, flop):
    seconds, nbytes = args["seconds"], args["bytes"]
    coll = Coll(name, nbytes, rank, world, dev)
    phase_sync()

    # Warm up and calibrate both loops (each alone).
    with torch.cuda.stream(gemm_stream):
        for _ in range(5):
            gemm()
    torch.cuda.synchronize()
    g_est = time_loop(gemm_stream, gemm, 10)
    with torch.cuda.stream(comm_stream):
        for _ in range(5):
            coll.fn()
    torch.cuda.synchronize()
    c_est = time_loop(comm_stream, coll.fn, 5)
    g_est, c_est = agree_max([g_est, c_est], dev)
    ng = max(20, int(math.ceil(seconds * 1e3 / g_est)))
    nc = max(20, int(math.ceil(seconds * 1e3 / c_est)))
    phase_sync()

    # (a) GEMM alone.
    gemm_alone = time_loop(gemm_stream, gemm, ng)
    phase_sync()
    # (b) collective alone.
    coll_alone = time_loop(comm_stream, coll.fn, nc)
    phase_sync()
    # (c) both at once, each loop sized to run about `seconds` at its rate alone.
    g_ms, c_ms = agree_max([gemm_alone, coll_alone], dev)
    ng_o = max(20, int(math.ceil(seconds * 1e3 / g_ms)))
    nc_o = max(20, int(math.ceil(seconds * 1e3 / c_ms)))
    trace_dir = os.environ.get("OVERLAP_TRACE_DIR", "")
    if trace_dir and name in os.environ.get("OVERLAP_TRACE_COLLS", "sendrecv").split():
        # A CUPTI timeline of the overlapped loops (GPU activity only: the host side is timed
        # by the loops themselves), one gzipped Chrome trace per rank and collective, for
        # tests/megatron/trace_gaps.py: whether the copies run back to back, one rank's copy
        # engines do both directions, or the copy lanes sit idle waiting for the host.
        os.makedirs(trace_dir, exist_ok=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            gemm_ov, coll_ov, det = overlapped(dev, gemm_stream, comm_stream, gemm, coll.fn, g_ms, c_ms, ng_o, nc_o)
        prof.export_chrome_trace(os.path.join(trace_dir, f"overlap_{name}_rank{rank}.json.gz"))
    else:
        gemm_ov, coll_ov, det = overlapped(dev, gemm_stream, comm_stream, gemm, coll.fn, g_ms, c_ms, ng_o, nc_o)
    phase_sync()

    r = {
        "coll": name,
        "rank": rank,
        "bytes": coll.bytes,
        "gemm_alone_ms": gemm_alone,
        "gemm_overlap_ms": gemm_ov,
        "gemm_alone_tflops": flop / (gemm_alone * 1e-3) / 1e12,
        "gemm_overlap_tflops": flop / (gemm_ov * 1e-3) / 1e12 if math.isfinite(gemm_ov) else float("nan"),
        "gemm_slowdown_pct": (gemm_ov / gemm_alone - 1.0) * 100.0,
        "coll_alone_ms": coll_alone,
        "coll_overlap_ms": coll_ov,
        "coll_alone_busbw": coll.busbw(coll_alone),
        "coll_overlap_busbw": coll.busbw(coll_ov),
        "gemm_alone_iters": ng,
        "coll_alone_iters": nc,
    }
    r["coll_slowdown_pct"] = (1.0 - r["coll_overlap_busbw"] / r["coll_alone_busbw"]) * 100.0
    r.update(det)
    del coll
    torch.cuda.empty_cache()
    return r


def fmt(x):
    return f"{x:.3f}" if isinstance(x, float) and math.isfinite(x) else str(x)


def main():
    if len(sys.argv) < 2:
        print("usage: torchrun --nproc-per-node 2 tests/gpu/overlap.py <label>", file=sys.stderr)
        sys.exit(2)
    label = sys.argv[1]
    # OVERLAP_SWITCH_INTERVAL (seconds): the interpreter's thread switch interval (default 5 ms).
    # With two enqueueing threads, the collective thread's Event.record() stalls about one
    # GEMM in 1 call of 5-10 (2026-11-23); a shorter interval tells whether that is the
    # interpreter lock.
    if os.environ.get("OVERLAP_SWITCH_INTERVAL"):
        sys.setswitchinterval(float(os.environ["OVERLAP_SWITCH_INTERVAL"]))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    args = {
        "bytes": int(os.environ.get("OVERLAP_BYTES", 256 * MIB)),
        "seconds": float(os.environ.get("OVERLAP_SECONDS", "1.5")),
        "gemm_n": int(os.environ.get("OVERLAP_GEMM_N", "8192")),
        "colls": os.environ.get("OVERLAP_COLLS", "sendrecv alltoall all_gather").split(),
    }
    version = nccl_version()
    log(rank, f"[{label}] ncclGetVersion from the loaded libnccl.so.2: {version}; world {world}; {args}")
    t_start = time.perf_counter()

    n = args["gemm_n"]
    g = torch.Generator(device=dev).manual_seed(1234 + rank)
    a = torch.randn((n, n), generator=g, device=dev, dtype=torch.bfloat16)
    b = torch.randn((n, n), generator=g, device=dev, dtype=torch.bfloat16)
    c = torch.empty((n, n), device=dev, dtype=torch.bfloat16)
    flop = 2.0 * n * n * n

    def gemm():
        torch.mm(a, b, out=c)

    gemm_stream = torch.cuda.Stream(device=dev)
    comm_stream = torch.cuda.Stream(device=dev)
    # First collective on the group: every rank takes part (lazy communicator setup).
    t = torch.ones(1, device=dev)
    dist.all_reduce(t)
    torch.cuda.synchronize()

    results = {}
    failed = []
    for name in args["colls"]:
        try:
            r = bench(name, args, rank, world, dev, gemm_stream, comm_stream, gemm, flop)
        except Exception as e:  # noqa: BLE001 - report and go on (a peer may then hang: the driver's timeout ends it)
            print(f"OVERLAP {label} {name} ERROR rank {rank}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
            failed.append(name)
            continue
        try:
            per_rank = [None] * world
            dist.all_gather_object(per_rank, r)
        except Exception as e:  # noqa: BLE001
            print(f"[{label}] rank {rank}: gathering {name} results failed: {e}", flush=True)
            per_rank = [r]
        if rank == 0:
            results[name] = dict(r, per_rank=per_rank)
            keys = (
                "gemm_alone_ms", "gemm_overlap_ms", "gemm_slowdown_pct", "coll_alone_busbw",
                "coll_overlap_busbw", "coll_slowdown_pct",
            )
            print(f"OVERLAP {label} {name} " + " ".join(f"{k}={fmt(r[k])}" for k in keys), flush=True)
            for pr in per_rank:
                if pr is None:
                    continue
                print(
                    f"  [{label}] {name} rank {pr['rank']}: GEMM {fmt(pr['gemm_alone_tflops'])} -> "
                    f"{fmt(pr['gemm_overlap_tflops'])} TFLOP/s, {name} busbw {fmt(pr['coll_alone_busbw'])} -> "
                    f"{fmt(pr['coll_overlap_busbw'])} GB/s; window {fmt(pr['window_ms'])} ms "
                    f"({pr['gemm_iters_in_window']} GEMMs, {pr['coll_iters_in_window']} {name}s inside; loops "
                    f"{fmt(pr['gemm_loop_ms'])} / {fmt(pr['coll_loop_ms'])} ms, host enqueue "
                    f"{fmt(pr['gemm_host_enqueue_ms'])} / {fmt(pr['coll_host_enqueue_ms'])} ms, {pr['enqueue']})",
                    flush=True,
                )
                pcts = {k: v for k, v in pr.items() if k.endswith("_us_pcts")}
                if pcts:
                    print(f"  [{label}] {name} rank {pr['rank']}: host us per call [median, 90th, 99th, max, n]: {pcts}",
                          flush=True)

    elapsed = time.perf_counter() - t_start
    for k, v in (SPLITS or {}).items():
        v.sort()
        print(f"  [{label}] rank {rank}: {k} host us over the run: median {v[len(v) // 2]:.1f}, 90th "
              f"{v[int(0.9 * len(v))]:.1f}, 99th {v[int(0.99 * len(v))]:.1f}, max {v[-1]:.1f}, n {len(v)}", flush=True)
    if rank == 0:
        out_dir = os.environ.get("CCL_BENCH_OUT")
        if out_dir:
            try:
                os.makedirs(out_dir, exist_ok=True)
                path = os.path.join(out_dir, f"overlap_{label}.json")
                doc = {
                    "label": label,
                    "nccl_version": version,
                    "world": world,
                    "args": args,
                    "gemm_flop": flop,
                    "elapsed_s": elapsed,
                    "failed": failed,
                    "results": results,
                }
                with open(path, "w") as f:
                    json.dump(doc, f, indent=1)
                print(f"[{label}] wrote {path}", flush=True)
            except OSError as e:
                print(f"[{label}] could not write the JSON: {e}", flush=True)
        print(f"[{label}] done in {elapsed:.1f} s; failed: {failed or 'none'}", flush=True)
    try:
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        print(f"[{label}] rank {rank}: destroy_process_group: {e}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
