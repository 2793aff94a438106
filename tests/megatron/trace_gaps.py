#!/usr/bin/env python3
"""Where the GPU time of a traced Megatron run goes (train_gpt.py with MEGATRON_TRACE_DIR).

    python3 tests/megatron/trace_gaps.py TRACE.json.gz [MORE ...]

For each trace (one rank of one run): the traced span, the time the GPU ran anything
(kernels, copies, memsets on any stream), the idle time and its longest gaps, and per stream
its busy time and what filled it (top kernel names). Comparing NVIDIA NCCL's trace with
libccl's for the same config and rank shows whether libccl's slower iteration is idle GPU time
(a stream held waiting) or longer work (slower copies, a contended SM), and whether one
rank's copy engines did both directions of an exchange one after the other.
"""
import gzip
import json
import sys
from collections import defaultdict

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def union(intervals):
    """Merged, sorted intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(intervals):
    return sum(e - s for s, e in union(intervals))


def summarize(events, top=5):
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS and "dur" in e]
    if not gpu:
        return None
    spans = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu]
    start = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    merged = union(spans)
    busy = sum(e - s for s, e in merged)
    gaps = sorted((b[0] - a[1] for a, b in zip(merged, merged[1:])), reverse=True)
    streams = defaultdict(list)
    names = defaultdict(lambda: defaultdict(float))
    for e, (s, t) in zip(gpu, spans):
        sid = (e.get("args") or {}).get("stream", "?")
        streams[sid].append((s, t))
        names[sid][e.get("name", "?")[:60]] += t - s
    per_stream = []
    for sid, iv in streams.items():
        tops = sorted(names[sid].items(), key=lambda kv: -kv[1])[:top]
        per_stream.append((covered(iv), sid, len(iv), tops))
    per_stream.sort(key=lambda x: -x[0])
    # The longest idle stretches of the whole GPU, with what ran just before and just after
    # (name, stream): a stream held by a wait shows as idle time ended by that stream's work.
    acts = sorted(zip(spans, gpu), key=lambda x: x[0][0])
    idle = []
    last_end, last_ev = None, None
    for (s0, s1), e in acts:
        if last_end is not None and s0 > last_end:
            idle.append((s0 - last_end, last_ev, e))
        if last_end is None or s1 > last_end:
            last_end, last_ev = s1, e
    idle.sort(key=lambda x: -x[0])
    label = lambda e: f"{e.get('name', '?')[:50]} (stream {(e.get('args') or {}).get('stream', '?')})"
    return {
        "longest_idle": [(g, label(a), label(b)) for g, a, b in idle[:top]],
        "span_us": end - start,
        "busy_us": busy,
        "idle_us": end - start - busy,
        "gaps_us": gaps[:top],
        "gaps_over_100us": sum(g for g in gaps if g > 100),
        "streams": per_stream,
    }


def host_calls(events, top=8):
    """Host (CPU) time of the communication calls and launches: name -> (total us, calls,
    median us). In a host-bound loop every microsecond spent in them lengthens the iteration."""
    keep = ("c10d::", "nccl", "Launch", "cudaStreamWait", "cudaEventRecord", "cudaMemcpy")
    per = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver") and "dur" in e:
            n = e.get("name", "?")
            if any(k in n for k in keep):
                per[n[:60]].append(float(e["dur"]))
    rows = [(sum(d), len(d), sorted(d)[len(d) // 2], n) for n, d in per.items()]
    return sorted(rows, reverse=True)[:top]


def peer_copies(events, back_to_back_us=20.0):
    """Peer-to-peer copies (copy engine, NVLink) of one rank: how many, their median time, and
    how many started within `back_to_back_us` of another one's end on a different stream of
    the same rank without overlapping it -- two directions of one exchange copied by one
    rank's engines one after the other (libccl's later side pulling after pushing) instead of
    each side pushing its own at once."""
    cps = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]), (e.get("args") or {}).get("stream"))
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy" and "PtoP" in e.get("name", "") and "dur" in e
    )
    if not cps:
        return None
    serial = sum(
        1
        for (s0, e0, a), (s1, e1, b) in zip(cps, cps[1:])
        if a != b and 0 <= s1 - e0 <= back_to_back_us
    )
    durs = sorted(e - s for s, e, _ in cps)
    return len(cps), durs[len(durs) // 2], serial


def main(paths):
    if not paths:
        print(__doc__)
        return 2
    for p in paths:
        s = summarize(load(p))
        print(f"== {p}")
        if s is None:
            print("   no GPU activity in this trace")
            continue
        print(f"   span {s['span_us'] / 1e3:.2f} ms, GPU busy {s['busy_us'] / 1e3:.2f} ms, "
              f"idle {s['idle_us'] / 1e3:.2f} ms (gaps over 100 us: {s['gaps_over_100us'] / 1e3:.2f} ms; "
              f"longest {', '.join(f'{g / 1e3:.2f}' for g in s['gaps_us'])} ms)")
        for g, before, after in s["longest_idle"]:
            print(f"   idle {g / 1e3:.3f} ms after {before} until {after}")
        for total, n, med, name in host_calls(load(p)):
            print(f"   host {total / 1e3:8.2f} ms  calls {n:6d}  median {med:8.1f} us  {name}")
        pc = peer_copies(load(p))
        if pc:
            print(f"   peer copies {pc[0]}, median {pc[1]:.1f} us, {pc[2]} started right after "
                  "another of this rank on another stream (one engine doing both directions)")
        for busy, sid, n, tops in s["streams"]:
            print(f"   stream {sid}: busy {busy / 1e3:.2f} ms in {n} activities")
            for name, us in tops:
                print(f"      {us / 1e3:8.2f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
