"""Does a fresh torch.cuda.Event's first record() wait while another thread sits in a GEMM
launch on a full queue? (Issue 5: overlap.py's collective thread stalls ~one GEMM in its
Event.record() beside the GEMM thread; torch creates an event's CUDA event in its first record.)

    python3 tests/gpu/event_create_probe.py
"""
import threading
import time

import torch


def pcts(v):
    v = sorted(v)
    return " ".join(f"p{q}={v[min(len(v) - 1, int(q / 100 * len(v)))]:.1f}" for q in (50, 90, 99)) + f" max={v[-1]:.1f} us"


def measure(stream, label):
    fresh, reused, reuse_ev = [], [], torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        reuse_ev.record()
        for _ in range(300):
            e = torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            e.record()
            t1 = time.perf_counter()
            reuse_ev.record()
            t2 = time.perf_counter()
            fresh.append((t1 - t0) * 1e6)
            reused.append((t2 - t1) * 1e6)
            time.sleep(300e-6)
    print(f"{label}: fresh Event.record() {pcts(fresh)}")
    print(f"{label}: reused Event.record() {pcts(reused)}")


def main():
    dev = torch.device("cuda", 0)
    n = 8192
    a = torch.randn((n, n), device=dev, dtype=torch.bfloat16)
    b = torch.randn((n, n), device=dev, dtype=torch.bfloat16)
    c = torch.empty((n, n), device=dev, dtype=torch.bfloat16)
    gs, cs = torch.cuda.Stream(), torch.cuda.Stream()
    measure(cs, "GEMM thread idle")
    stop = False

    def gemms():
        with torch.cuda.stream(gs):
            while not stop:
                torch.mm(a, b, out=c)

    th = threading.Thread(target=gemms)
    th.start()
    time.sleep(3.0)  # the GEMM queue fills (1021 entries at ~1.5 ms each would take longer: the host then blocks per launch)
    measure(cs, "GEMM thread on a full queue")
    stop = True
    th.join()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
