"""A 1F1B pipeline-parallel micro-benchmark (Megatron-style batched P2P), two stages.

Run under torchrun (the library under test is chosen outside, by LD_PRELOAD):

    python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/pp_1f1b.py <label>

Each rank is one pipeline stage holding PP_LAYERS x (Linear(H, H) + GELU) in bf16, seeded per
stage. One iteration runs PP_MICRO micro-batches of shape (PP_MB, PP_SEQ, H) through Megatron's
non-interleaved 1F1B schedule (warmup forwards, steady one-forward-one-backward, cooldown
backwards); activations go forward and gradients backward with dist.batch_isend_irecv as
Megatron's batch_p2p_comm does (followed by torch.cuda.synchronize(), Megatron's
batch_p2p_sync default; PP_P2P_SYNC=0 drops it). Loss = mean of the last stage's output (each
micro-batch's loss divided by the number of micro-batches); plain SGD at the end of each
iteration. PP_WARMUP untimed + PP_ITERS timed iterations; an iteration's time is the slowest
rank's. Rank 0 prints every iteration's time and loss, then

    PP1F1B <label> median_ms=.. mean_ms=..

and writes $CCL_BENCH_OUT/pp_<label>.json (times_ms of the timed iterations, losses of every
iteration as float.hex strings, so two runs compare bit for bit) when that is set.

    python3 tests/gpu/pp_1f1b.py --compare DIR labelA labelB

loads DIR/pp_labelA.json and DIR/pp_labelB.json, says whether the losses are bitwise equal and
prints the median time ratio B/A; exit 1 if the losses differ (2 if a file is missing).

Env (defaults): PP_LAYERS 4, PP_HIDDEN 4096, PP_MB 8, PP_SEQ 1024, PP_MICRO 8, PP_WARMUP 5,
PP_ITERS 20, PP_LR 20, PP_P2P_SYNC 1, PP_DEVICE cuda (cpu: gloo, for a smoke test only).
"""
import json
import os
import statistics
import sys
import time

# cuBLAS needs a fixed workspace for deterministic results; it is read when cuBLAS starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def env_int(name, default):
    return int(os.environ.get(name, default))


def compare(out_dir, a, b):
    docs = {}
    for label in (a, b):
        path = os.path.join(out_dir, f"pp_{label}.json")
        try:
            with open(path) as f:
                docs[label] = json.load(f)
        except (OSError, ValueError) as e:
            print(f"PP1F1B compare: cannot read {path}: {e}")
            return 2
    la, lb = docs[a].get("losses", []), docs[b].get("losses", [])
    equal = bool(la) and la == lb
    print(f"PP1F1B compare {a} vs {b}: losses bitwise equal: {'yes' if equal else 'no'} ({len(la)} / {len(lb)} losses)")
    if not equal:
        for i, (x, y) in enumerate(zip(la, lb)):
            if x != y:
                print(f"  first difference at iteration {i}: {a} {float.fromhex(x)!r} ({x}) vs {b} {float.fromhex(y)!r} ({y})")
                break
    ma, mb = docs[a].get("median_ms"), docs[b].get("median_ms")
    if ma and mb:
        print(f"PP1F1B compare median_ms {a}={ma:.3f} {b}={mb:.3f} ratio {b}/{a}={mb / ma:.3f}")
    else:
        print(f"PP1F1B compare: no median time in one of the files ({ma}, {mb})")
    return 0 if equal else 1


def run(label):
    import torch
    import torch.distributed as dist

    cpu = os.environ.get("PP_DEVICE", "cuda") == "cpu"
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if cpu:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=dev)

    def sync():
        if not cpu:
            torch.cuda.synchronize()

    layers, hidden = env_int("PP_LAYERS", 4), env_int("PP_HIDDEN", 4096)
    mb, seq, micro = env_int("PP_MB", 8), env_int("PP_SEQ", 1024), env_int("PP_MICRO", 8)
    warmup, iters = env_int("PP_WARMUP", 5), env_int("PP_ITERS", 20)
    lr = float(os.environ.get("PP_LR", "20"))
    p2p_sync = os.environ.get("PP_P2P_SYNC", "1") == "1" and not cpu
    cfg = dict(layers=layers, hidden=hidden, mb=mb, seq=seq, micro=micro, warmup=warmup, iters=iters, lr=lr,
               p2p_sync=p2p_sync, world=world, device=str(dev.type))
    version = None
    if rank == 0:
        if not cpu:
            try:
                import ctypes

                lib = ctypes.CDLL("libnccl.so.2")
                v = ctypes.c_int(0)
                lib.ncclGetVersion(ctypes.byref(v))
                version = v.value
            except Exception as e:  # noqa: BLE001 - only a log line depends on it
                version = f"unknown ({e})"
        print(f"[{label}] ncclGetVersion from the loaded libnccl.so.2: {version}; {cfg}", flush=True)

    try:
        torch.use_deterministic_algorithms(True)
    except Exception as e:  # noqa: BLE001
        print(f"[{label}] rank {rank}: use_deterministic_algorithms: {e}", flush=True)
    try:
        # Receive buffers are written whole; skip the NaN fill deterministic mode adds to empty().
        torch.utils.deterministic.fill_uninitialized_memory = False
    except AttributeError:
        pass

    stage, nstages = rank, world
    first, last = stage == 0, stage == nstages - 1
    prev_rank, next_rank = stage - 1, stage + 1
    dt = torch.bfloat16
    torch.manual_seed(1000 + stage)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(hidden, hidden, device=dev, dtype=dt), torch.nn.GELU()]
    model = torch.nn.Sequential(*mods)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    shape = (mb, seq, hidden)
    inputs = []
    if first:
        g = torch.Generator(device=dev).manual_seed(77)
        inputs = [torch.randn(shape, generator=g, device=dev, dtype=dt) for _ in range(micro)]

    def p2p(send_prev=None, recv_prev=False, send_next=None, recv_next=False):
        """Megatron's _batched_p2p_ops: one batch_isend_irecv, then wait (and synchronize)."""
        rp = torch.empty(shape, device=dev, dtype=dt) if recv_prev else None
        rn = torch.empty(shape, device=dev, dtype=dt) if recv_next else None
        ops = []
        if send_prev is not None:
            ops.append(dist.P2POp(dist.isend, send_prev, prev_rank))
        if rp is not None:
            ops.append(dist.P2POp(dist.irecv, rp, prev_rank))
        if send_next is not None:
            ops.append(dist.P2POp(dist.isend, send_next, next_rank))
        if rn is not None:
            ops.append(dist.P2POp(dist.irecv, rn, next_rank))
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            if p2p_sync:
                torch.cuda.synchronize()
        return rp, rn

    def recv_forward():
        return None if first else p2p(recv_prev=True)[0]

    def send_forward(y):
        if not last:
            p2p(send_next=y)

    def recv_backward():
        return None if last else p2p(recv_next=True)[1]

    def send_backward(dx):
        if not first:
            p2p(send_prev=dx)

    def send_forward_recv_backward(y):
        return None if last else p2p(send_next=y, recv_next=True)[1]

    def send_backward_recv_forward(dx):
        return None if first else p2p(send_prev=dx, recv_prev=True)[0]

    losses_it = []

    def forward(x, i):
        if first:
            x = inputs[i]
        else:
            x.requires_grad_(True)
        y = model(x)
        if last:
            loss = y.float().mean() / micro
            losses_it.append(loss.detach())
            return x, loss
        return x, y

    def backward(x, y, dy):
        if last:
            torch.autograd.backward(y)
        else:
            torch.autograd.backward(y, grad_tensors=dy)
        return None if first else x.grad

    def iteration():
        losses_it.clear()
        n_warm = min(nstages - stage - 1, micro)
        n_rest = micro - n_warm
        xs, ys = [], []
        fi = 0
        for _ in range(n_warm):
            x = recv_forward()
            x, y = forward(x, fi)
            fi += 1
            send_forward(y)
            xs.append(x)
            ys.append(y)
        x = recv_forward() if n_rest > 0 else None
        for i in range(n_rest):
            x, y = forward(x, fi)
            fi += 1
            dy = send_forward_recv_backward(y)
            xs.append(x)
            ys.append(y)
            bx, by = xs.pop(0), ys.pop(0)
            dx = backward(bx, by, dy)
            if i == n_rest - 1:
                x = None
                send_backward(dx)
            else:
                x = send_backward_recv_forward(dx)
        for _ in range(n_warm):
            bx, by = xs.pop(0), ys.pop(0)
            dy = recv_backward()
            dx = backward(bx, by, dy)
            send_backward(dx)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if last:
            return torch.stack(losses_it).sum().double()
        return torch.zeros((), dtype=torch.float64, device=dev)

    times, losses = [], []
    sync()
    dist.barrier()
    for it in range(warmup + iters):
        sync()
        t0 = time.perf_counter()
        loss = iteration()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss)
    # The slowest rank's time per iteration; the last stage's losses (float64 carries the
    # float32 losses exactly).
    t = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    ls = torch.stack(losses)
    dist.broadcast(ls, src=nstages - 1)
    times_all, loss_all = t.tolist(), ls.tolist()
    timed = times_all[warmup:]
    if rank == 0:
        for i, (ms, lo) in enumerate(zip(times_all, loss_all)):
            kind = "warmup" if i < warmup else "timed"
            print(f"[{label}] iter {i:3d} ({kind}) time_ms={ms:.3f} loss={lo!r} ({float.hex(lo)})", flush=True)
        med, mean = statistics.median(timed), statistics.fmean(timed)
        print(f"PP1F1B {label} median_ms={med:.3f} mean_ms={mean:.3f}", flush=True)
        out_dir = os.environ.get("CCL_BENCH_OUT")
        if out_dir:
            try:
                os.makedirs(out_dir, exist_ok=True)
                path = os.path.join(out_dir, f"pp_{label}.json")
                doc = {
                    "label": label,
                    "nccl_version": version,
                    "config": cfg,
                    "times_ms": timed,
                    "warmup_times_ms": times_all[:warmup],
                    "losses": [float.hex(x) for x in loss_all],
                    "losses_repr": [repr(x) for x in loss_all],
                    "median_ms": med,
                    "mean_ms": mean,
                }
                with open(path, "w") as f:
                    json.dump(doc, f, indent=1)
                print(f"[{label}] wrote {path}", flush=True)
            except OSError as e:
                print(f"[{label}] could not write the JSON: {e}", flush=True)
    try:
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        print(f"[{label}] rank {rank}: destroy_process_group: {e}", flush=True)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--compare":
        if len(sys.argv) != 5:
            print("usage: pp_1f1b.py --compare DIR labelA labelB", file=sys.stderr)
            sys.exit(2)
        sys.exit(compare(*sys.argv[2:5]))
    if len(sys.argv) != 2:
        print("usage: torchrun --nproc-per-node 2 tests/gpu/pp_1f1b.py <label> | pp_1f1b.py --compare DIR A B",
              file=sys.stderr)
        sys.exit(2)
    run(sys.argv[1])


if __name__ == "__main__":
    main()
