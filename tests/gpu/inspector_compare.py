#!/usr/bin/env python3
"""Compares nccl-tests' (or ccl-perf's) all_reduce bus bandwidth with the one NVIDIA's inspector
profiler plugin computed for the same run, per size, out of place and in place apart.

    inspector_compare.py NCCL_TESTS_LOG INSPECTOR_DUMP_DIR NRANKS NAME

The inspector writes one record per operation (one file per process, in completion order). Of
each size's records on a rank, the in-place timed operations are the last `iters`, the
out-of-place timed ones the `iters` before the in-place warm-up: one synchronising operation in
nccl-tests (whose warm-up for every size runs before all sizes), `warmup` operations in
ccl-perf (which warms up each placement). `iters` and `warmup` are read from the log's header.
The inspector's figure for a placement is the busbw of the mean execution time of its timed
operations over all ranks, as nccl-tests' is of their mean time.

Used by tests/gpu/profiler_inspector.sh and tests/bench/profiler_inspector_host.sh.
"""
import json
import os
import re
import statistics
import sys

log, dump, n, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

# nccl-tests rows: size count type redop root | time algbw busbw #wrong (out of place) | in place
tests, warmup, iters = {}, 0, 0
for line in open(log, errors="replace"):
    m = re.search(r"warmup iters: (\d+) iters: (\d+)", line)
    if m:
        warmup, iters = int(m.group(1)), int(m.group(2))
    f = line.split()
    if len(f) >= 13 and f[0].isdigit():
        try:
            tests[int(f[0])] = (float(f[7]), float(f[11]))
        except ValueError:
            pass
if iters == 0:
    sys.exit(f"{log}: no 'warmup iters: W iters: N' header")

# Per rank file, per size: execution times in completion order.
per_rank, sources = [], {}
dec = json.JSONDecoder()
for fn in sorted(os.listdir(dump)):
    text = open(os.path.join(dump, fn), errors="replace").read()
    sizes = {}
    i = 0
    while True:
        i = text.find("{", i)
        if i < 0:
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        p = obj.get("coll_perf") if isinstance(obj, dict) else None
        if not p or p.get("coll") != "AllReduce":
            continue
        sizes.setdefault(int(p["coll_msg_size_bytes"]), []).append(float(p["coll_exec_time_us"]))
        src = p.get("coll_timing_source", "?")
        sources[src] = sources.get(src, 0) + 1
    per_rank.append(sizes)


def windows(rec):
    """The out-of-place and in-place timed operations of one rank's records of one size."""
    if len(rec) < 2 * iters + 1:
        return None
    gap = warmup if len(rec) == 2 * (warmup + iters) else 1
    return rec[-(2 * iters + gap):-(iters + gap)], rec[-iters:]


factor = 2.0 * (n - 1) / n
print(f"\n{name}: all_reduce busbw (GB/s), the test's beside the inspector's, {n} ranks, "
      f"{iters} timed operations per placement; inspector timing sources {sources}")
print("| bytes | test oop | inspector oop | ratio | test ip | inspector ip | ratio | inspector mean us oop / ip |")
print("|---|---|---|---|---|---|---|---|")
worst = {20: 0.0, 100: 0.0}
for size in sorted(tests):
    got = [windows(r.get(size, [])) for r in per_rank]
    got = [g for g in got if g]
    if not got:
        print(f"| {size} | {tests[size][0]:.2f} | - | - | {tests[size][1]:.2f} | - | - | - |")
        continue
    row, means = [f"| {size}"], []
    for k in (0, 1):
        t = statistics.mean([x for g in got for x in g[k]])
        bw = size / 1e9 / (t / 1e6) * factor if t > 0 else 0.0
        ref = tests[size][k]
        ratio = bw / ref if ref > 0 else 0.0
        for floor in worst:
            if t >= floor:
                worst[floor] = max(worst[floor], abs(ratio - 1))
        row += [f"{ref:.2f}", f"{bw:.2f}", f"{ratio:.3f}"]
        means.append(f"{t:.1f}")
    print(" | ".join(row) + f" | {' / '.join(means)} |")
print()
for floor, w in worst.items():
    print(f"largest difference where an operation takes {floor} us or more: {w * 100:.1f}%")
