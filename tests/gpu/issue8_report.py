#!/usr/bin/env python3
"""Markdown summaries for tests/gpu/device_issue8.sh (issue 8: 4 and 8 GPUs). Standard library only.

    issue8_report.py corr LOGDIR NGPU "CORR_ARGS"
        one row per logs/corr.<mode>.<op>.log: exit status, rows, total #wrong (both #wrong
        columns; N/A counts 0 and is flagged), verdict
    issue8_report.py perf LOGDIR NGPU "SIZES" SWEEP
        NCCL vs libccl from logs/perf.<mode>.<op>.<lib>.log (SWEEP=1: one -b MIN -e MAX -f 2 run,
        rows picked by position) or logs/perf.<mode>.<op>.<lib>.<size>.log (SWEEP=0: first row);
        detailed table, a compact ratio table for docs/PERFORMANCE.md and the issue's targets
    issue8_report.py topo LOGDIR NGPU
        nvidia-smi -L / topo -m / bus ids beside ccl-topo's text and JSON: GPUs seen, GPU-GPU
        paths compared, rings that use every GPU
    issue8_report.py sizes "SIZES"
        prints MIN MAX of the sweep when SIZES all lie on MIN * 2^k, else nothing (exit 1)

The row layout is ccl-perf's (nccl-tests): size count type redop root, then time algbw busbw
#wrong out of place, the same in place.
"""
import glob
import json
import os
import re
import sys

OPS = "all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter".split()
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
                 r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")
# Issue 8 targets (as in the 2-GPU issues): busbw ratio libccl / NCCL.
TARGETS = [("all_reduce", 1 << 30, 1.00)] + [(op, 128 << 20, 1.15) for op in
                                              ("all_gather", "alltoall", "broadcast", "sendrecv")]


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMGkmg]?)B?", s.strip())
    if not m:
        raise ValueError(f"bad size {s!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def size_label(n):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def rows_of(path):
    rows = []
    rc = None
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = ROW.match(line)
                if m:
                    g = m.groups()
                    rows.append({"size": int(g[0]), "count": int(g[1]), "type": g[2], "redop": g[3],
                                 "time": float(g[5]), "busbw": float(g[7]), "wrong_oop": g[8],
                                 "time_ip": float(g[9]), "busbw_ip": float(g[11]), "wrong_ip": g[12]})
                m = re.match(r"^exit (\d+)", line)
                if m:
                    rc = int(m.group(1))
    except OSError:
        return None, None
    return rows, rc


def mode_label(mode, ngpu):
    return f"g{ngpu}" if mode.startswith("g") else mode


def sweep_sizes(bmin, bmax, factor):
    out, s = [], bmin
    while s <= bmax:
        out.append(s)
        if factor <= 1:
            break
        s *= factor
    return out


def arg_value(args, short, long_, default=None):
    for i, a in enumerate(args):
        if a in (short, long_) and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(long_ + "="):
            return a.split("=", 1)[1]
    return default


def expected_rows(args):
    """Rows one ccl-perf run prints for these arguments, or None when -d/-o/-r/-i multiply them."""
    if any(a in args for a in ("-d", "--datatype", "-o", "--op", "-r", "--root", "-i", "--stepbytes")):
        return None
    try:
        b = parse_size(arg_value(args, "-b", "--minbytes", "32M"))
        e = parse_size(arg_value(args, "-e", "--maxbytes", "32M"))
        f = int(arg_value(args, "-f", "--stepfactor", "1"))
    except ValueError:
        return None
    return len(sweep_sizes(b, e, f))


def is_num(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def corr(logdir, ngpu, corr_args):
    args = corr_args.split()
    exp = expected_rows(args)
    print(f"| mode | op | exit | rows{'' if exp is None else f' (of {exp})'} | #wrong | N/A | verdict |")
    print("|---|---|---:|---:|---:|---|---|")
    def key(p):
        parts = os.path.basename(p).split(".")
        return parts[1], OPS.index(parts[2]) if parts[2] in OPS else 99

    files = sorted((p for p in glob.glob(os.path.join(logdir, "corr.*.log"))
                    if len(os.path.basename(p).split(".")) == 4), key=key)
    ok_runs = total_wrong = 0
    for path in files:
        _, mode, op, _ = os.path.basename(path).split(".")
        rows, rc = rows_of(path)
        if rows is None:
            continue
        with open(path, errors="replace") as f:
            text = f.read()
        skipped = "SKIPPED" in text[:200]
        wrong = 0
        na_oop = na_ip = 0
        for r in rows:
            for key in ("wrong_oop", "wrong_ip"):
                if is_num(r[key]):
                    wrong += int(float(r[key]))
                elif key == "wrong_oop":
                    na_oop += 1
                else:
                    na_ip += 1
        total_wrong += wrong
        notes = []
        if na_ip:
            notes.append(f"{na_ip} in-place N/A" + (" (not checked, as nccl-tests)" if op in ("alltoall", "sendrecv") else " (UNEXPECTED)"))
        if na_oop:
            notes.append(f"{na_oop} out-of-place N/A (UNCHECKED)")
        bad = []
        if skipped:
            bad.append("skipped (deadline)")
        elif rc != 0:
            bad.append(f"exit {rc}" + (" (timeout)" if rc in (124, 137) else ""))
        if not skipped and not rows:
            bad.append("no rows")
        if exp is not None and rows and len(rows) < exp:
            bad.append(f"{len(rows)}/{exp} rows")
        if wrong:
            bad.append(f"{wrong} wrong")
        if na_oop or (na_ip and op not in ("alltoall", "sendrecv")):
            bad.append("unchecked rows")
        m = re.search(r"^# Out of bounds values : (\d+) (\S+)", text, re.M)
        if m and m.group(2) != "OK":
            bad.append(f"out of bounds {m.group(1)}")
        verdict = "ok" if not bad else "FAIL: " + ", ".join(bad)
        ok_runs += not bad
        print(f"| {mode} | {op} | {rc if rc is not None else '-'} | {len(rows)} | {wrong} | "
              f"{'; '.join(notes) or '-'} | {verdict} |")
    print()
    print(f"correctness: {ok_runs} of {len(files)} runs ok, {total_wrong} wrong elements in all "
          f"(ccl-perf {corr_args}, N = {ngpu})")
    return 0 if files and ok_runs == len(files) else 1


def fmt(x, p=2):
    return "-" if x is None else f"{x:.{p}f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def perf(logdir, ngpu, sizes_s, sweep):
    sizes = [parse_size(s) for s in sizes_s.split()]
    data = {}  # (mode, op) -> lib -> size -> row
    order = []
    for path in sorted(glob.glob(os.path.join(logdir, "perf.*.log"))):
        parts = os.path.basename(path)[:-4].split(".")
        if sweep and len(parts) == 4:
            _, mode, op, lib = parts
            rows, _ = rows_of(path)
            req = sweep_sizes(min(sizes), max(sizes), 2)
            got = {req[i]: r for i, r in enumerate(rows or []) if i < len(req)}
        elif not sweep and len(parts) == 5:
            _, mode, op, lib, size = parts
            rows, _ = rows_of(path)
            got = {int(size): rows[0]} if rows else {}
        else:
            continue
        if (mode, op) not in order:
            order.append((mode, op))
        data.setdefault((mode, op), {}).setdefault(lib, {}).update(got)
    order.sort(key=lambda k: (k[0], OPS.index(k[1]) if k[1] in OPS else 99))

    print("| mode | op | size | NCCL us | libccl us | NCCL busbw | libccl busbw | busbw ratio | latency ratio | target |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    results = {}
    for mode, op in order:
        for s in sizes:
            n = data[(mode, op)].get("nccl", {}).get(s)
            c = data[(mode, op)].get("ccl", {}).get(s)
            br = ratio(c and c["busbw"], n and n["busbw"])
            lr = ratio(c and c["time"], n and n["time"])
            results[(mode, op, s)] = (br, lr)
            tgt = ""
            for top, tmin, want in TARGETS:
                if op == top and s >= tmin and (top != "all_reduce" or s == tmin):
                    tgt = f">= {want:.2f}: " + ("ok" if br is not None and br >= want else "MISS")
            print(f"| {mode} | {op} | {size_label(s)} | {fmt(n and n['time'])} | {fmt(c and c['time'])} | "
                  f"{fmt(n and n['busbw'])} | {fmt(c and c['busbw'])} | {fmt(br)} | {fmt(lr)} | {tgt} |")
    print()
    print("busbw ratio = libccl / NCCL busbw (higher is better); latency ratio = libccl / NCCL time "
          "(lower is better); out-of-place columns; "
          + ("one -b %s -e %s -f 2 sweep per run" % (size_label(min(sizes)), size_label(max(sizes))) if sweep
             else "one run per size"))
    print()
    # Compact: for docs/PERFORMANCE.md.
    small = [s for s in sizes if s < 4096]
    print(f"Ratios libccl / NCCL, {ngpu} GPUs (busbw; " + (f"at {', '.join(size_label(s) for s in small)}: time, lower is better" if small else "") + ")")
    print()
    print("| op | mode | " + " | ".join(size_label(s) + (" (time)" if s in small else "") for s in sizes) + " |")
    print("|---|---|" + "---:|" * len(sizes))
    for mode, op in sorted(order, key=lambda k: (OPS.index(k[1]) if k[1] in OPS else 99, k[0])):
        cells = []
        for s in sizes:
            br, lr = results.get((mode, op, s), (None, None))
            cells.append(fmt(lr if s in small else br))
        print(f"| {op} | {mode} | " + " | ".join(cells) + " |")
    print()
    met = missed = 0
    lines = []
    for mode in sorted({m for m, _ in order}):
        for top, tmin, want in TARGETS:
            for s in sizes:
                if s < tmin or (top == "all_reduce" and s != tmin) or (mode, top, s) not in results:
                    continue
                br = results[(mode, top, s)][0]
                good = br is not None and br >= want
                met += good
                missed += not good
                lines.append(f"{mode} {top} {size_label(s)}: {fmt(br)} (want >= {want:.2f}) {'ok' if good else 'MISS'}")
    print(f"targets: {met} met, {missed} missed")
    for line in lines:
        print(f"- {line}")
    return 0


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def norm_busid(s):
    s = s.strip().lower()
    m = re.search(r"(?:([0-9a-f]+):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f])$", s)
    if not m:
        return s
    return f"{int(m.group(1) or '0', 16):x}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def read(path):
    try:
        with open(path, errors="replace") as f:
            return ANSI.sub("", f.read())
    except OSError:
        return None


def smi_matrix(text):
    """{(i, j): token} over the GPU columns of `nvidia-smi topo -m`."""
    mat, cols = {}, None
    for line in (text or "").splitlines():
        toks = line.split()
        if not toks:
            continue
        if cols is None and toks[0] == "GPU0":
            cols = []
            for t in toks:
                if re.fullmatch(r"GPU\d+", t):
                    cols.append(int(t[3:]))
                else:
                    break
            continue
        m = re.fullmatch(r"GPU(\d+)", toks[0])
        if cols is not None and m:
            for k, j in enumerate(cols):
                if k + 1 < len(toks):
                    mat[(int(m.group(1)), j)] = toks[k + 1]
    return mat


def topo_text_matrix(text):
    """{(i, j): token} over the gpu columns of ccl-topo's text matrix."""
    mat, cols = {}, None
    for line in (text or "").splitlines():
        toks = line.split()
        if not toks:
            continue
        if cols is None and toks[0] == "gpu0" and len(toks) > 1 and not re.match(r"\d", toks[1]) and "numa" not in toks:
            cols = [int(t[3:]) for t in toks if re.fullmatch(r"gpu\d+", t)]
            continue
        m = re.fullmatch(r"gpu(\d+)", toks[0])
        if cols is not None and m and len(toks) >= len(cols) + 1 and not re.match(r"[0-9a-f]{4}:", toks[1]):
            for k, j in enumerate(cols):
                mat[(int(m.group(1)), j)] = toks[k + 1]
    return mat


def topo(logdir, ngpu):
    smi_l = read(os.path.join(logdir, "nvidia-smi-L.txt")) or ""
    smi_gpus = len(re.findall(r"^GPU \d+:", smi_l, re.M))
    smi_topo = read(os.path.join(logdir, "nvidia-smi-topo.txt"))
    busids = {}
    for line in (read(os.path.join(logdir, "gpu-busids.csv")) or "").splitlines():
        p = [x.strip() for x in line.split(",")]
        if len(p) >= 2 and p[0].isdigit():
            busids[norm_busid(p[1])] = int(p[0])
    text = read(os.path.join(logdir, "ccl-topo.txt"))
    js = None
    try:
        with open(os.path.join(logdir, "ccl-topo.json")) as f:
            js = json.load(f)
    except (OSError, ValueError):
        pass
    print(f"- nvidia-smi: {smi_gpus} GPU(s); NGPU = {ngpu}")
    if text is None and js is None:
        print("- ccl-topo: no output (missing .dev/ccl-topo? copy target/release/ccl-topo to .dev/)")
        return 1
    # GPUs libccl sees.
    gpus = None
    topo_bus = {}
    if js is not None:
        gpus = len(js.get("gpus", []))
        for g in js.get("gpus", []):
            topo_bus[int(g.get("dev", g.get("rank", 0)))] = norm_busid(str(g.get("busid", "")))
    elif text:
        m = re.search(r"(\d+) GPU\(s\)", text)
        gpus = int(m.group(1)) if m else None
    if text:
        for m in re.finditer(r"^\s+gpu(\d+) ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F])", text, re.M):
            topo_bus.setdefault(int(m.group(1)), norm_busid(m.group(2)))
    print(f"- ccl-topo: {gpus} GPU(s)" + (" (matches nvidia-smi)" if gpus == smi_gpus else f" (nvidia-smi shows {smi_gpus}: MISMATCH)"))
    # Rings.
    rings = []
    nranks = None
    if js is not None:
        nranks = js.get("ranks")
        rings = [r.get("order", []) for r in js.get("rings", [])]
    elif text:
        m = re.search(r"(\d+) rank\(s\)", text)
        nranks = int(m.group(1)) if m else None
        for m in re.finditer(r"^\s+ring\s+\d+:\s+([\d ]+?)\s*(?:nics|$)", text, re.M):
            rings.append([int(x) for x in m.group(1).split()])
    want = set(range(nranks if nranks else (gpus or 0)))
    full = [r for r in rings if set(r) == want and len(r) == len(want)]
    print(f"- rings: {len(rings)}, {len(full)} of them use every GPU once ({len(want)} ranks)"
          + (": yes, all rings" if rings and len(full) == len(rings) else ": NO" if rings else ": none found"))
    # Paths: ccl-topo's text matrix (same NV# notation) against nvidia-smi's, GPU pairs only.
    smi = smi_matrix(smi_topo)
    mine = topo_text_matrix(text)
    # ccl-topo index -> nvidia-smi index through the bus ids, where both are known.
    to_smi = {i: busids[b] for i, b in topo_bus.items() if b in busids}
    mapped = len(to_smi) == gpus and gpus
    agree, differ = 0, []
    for (i, j), tok in sorted(mine.items()):
        if i == j:
            continue
        si, sj = (to_smi[i], to_smi[j]) if mapped else (i, j)
        st = smi.get((si, sj))
        if st is None:
            continue
        if st == tok:
            agree += 1
        else:
            differ.append(f"gpu{i}-gpu{j}: ccl-topo {tok}, nvidia-smi {st}")
    kinds = sorted({t for (i, j), t in smi.items() if i != j})
    print(f"- GPU-GPU paths: nvidia-smi shows {', '.join(kinds) or 'nothing'}; ccl-topo agrees on {agree} of "
          f"{agree + len(differ)} ordered pairs" + (" (GPUs matched by PCI bus id)" if mapped else " (GPUs matched by index)")
          + ("" if not differ else ": " + "; ".join(differ[:8]) + (" ..." if len(differ) > 8 else "")))
    if js is not None:
        nvl = sum(1 for p in js.get("paths", []) if str(p.get("from", "")).startswith("gpu")
                  and str(p.get("to", "")).startswith("gpu") and p.get("type") == "NVL")
        tr = {}
        for t in js.get("transports", []):
            tr[t.get("transport")] = tr.get(t.get("transport"), 0) + 1
        print(f"- ccl-topo JSON: {nvl} GPU-GPU paths of type NVL; channels {js.get('channels')}; transports "
              + ", ".join(f"{k} x{v}" for k, v in sorted(tr.items(), key=lambda kv: str(kv[0]))))
    ok = gpus == smi_gpus == ngpu and rings and len(full) == len(rings) and not differ and agree > 0
    print(f"- topo verdict: {'ok' if ok else 'CHECK'}")
    return 0 if ok else 1


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "corr":
        return corr(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    if cmd == "perf":
        return perf(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1")
    if cmd == "topo":
        return topo(sys.argv[2], int(sys.argv[3]))
    if cmd == "sizes":
        sizes = sorted(parse_size(s) for s in sys.argv[2].split())
        lo = sizes[0]
        if lo > 0 and all(s % lo == 0 and ((s // lo) & (s // lo - 1)) == 0 for s in sizes):
            print(lo, sizes[-1])
            return 0
        return 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
