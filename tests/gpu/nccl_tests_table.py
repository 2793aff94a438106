"""Tables from nccl_tests_ab.sh logs: python3 nccl_tests_table.py DIR LIB_A LIB_B ...

DIR holds OP.LIB.REP.log (nccl-tests output). For each op and the sizes 8 B, 2 MiB, 128 MiB and
512 MiB: busbw out of place / in place per library (the best of its repetitions, and the spread
across them), each library's ratio to every earlier one, and #wrong summed over all sizes and
repetitions. A log without result rows counts as failed.
"""
import collections
import glob
import os
import sys

SIZES = [8, 2 << 20, 128 << 20, 512 << 20]


def rows(path):
    """(size, oop busbw, ip busbw, wrong, time oop us) per result row."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            t = line.split()
            if len(t) < 13 or not t[0].isdigit():
                continue
            try:
                size = int(t[0])
                o_time, o_bus, o_wrong = float(t[-8]), float(t[-6]), t[-5]
                i_bus, i_wrong = float(t[-2]), t[-1]
            except ValueError:
                continue
            wrong = sum(int(float(w)) for w in (o_wrong, i_wrong) if w != "N/A")
            out.append((size, o_bus, i_bus, wrong, o_time))
    return out


def main():
    d, libs = sys.argv[1], sys.argv[2:]
    data = collections.defaultdict(list)  # (op, lib) -> [rows per rep]
    for p in sorted(glob.glob(os.path.join(d, "*.log"))):
        parts = os.path.basename(p).split(".")
        if len(parts) != 4:
            continue
        op, lib, _rep, _ = parts
        data[(op, lib)].append(rows(p))
    ops = sorted({op for op, _ in data})
    head = "| op | size | " + " | ".join(f"{l} oop/ip GB/s" for l in libs)
    ratios = [(b, a) for i, b in enumerate(libs) for a in libs[:i]]
    head += "".join(f" | {b}/{a} oop/ip" for b, a in ratios) + " |"
    print(head)
    print("|" + "---|" * (2 + len(libs) + len(ratios)))
    wrong_total = collections.Counter()
    failed = []
    for op in ops:
        for lib in libs:
            for r in data.get((op, lib), []):
                wrong_total[lib] += sum(x[3] for x in r)
                if not r:
                    failed.append(f"{op}/{lib}")
        for size in SIZES:
            best, spread = {}, {}
            for lib in libs:
                vals = [[x for x in r if x[0] == size] for r in data.get((op, lib), [])]
                vals = [v[0] for v in vals if v]
                if not vals:
                    continue
                o = [v[1] for v in vals]
                i = [v[2] for v in vals]
                t = [v[4] for v in vals]
                best[lib] = (max(o), max(i), min(t))
                spread[lib] = (max(o) / min(o) if min(o) > 0 else 1.0)
            if not best:
                continue
            if size == 8:
                cells = [f"{best[l][2]:.1f} us" if l in best else "-" for l in libs]
                rat = [f"{best[a][2] / best[b][2]:.2f} (time)" if a in best and b in best else "-"
                       for b, a in ratios]
            else:
                cells = [f"{best[l][0]:.1f}/{best[l][1]:.1f}" if l in best else "-" for l in libs]
                rat = [f"{best[b][0] / best[a][0]:.3f}/{best[b][1] / best[a][1]:.3f}"
                       if a in best and b in best and best[a][0] > 0 and best[a][1] > 0 else "-"
                       for b, a in ratios]
            label = {8: "8 B", 2 << 20: "2 MiB", 128 << 20: "128 MiB", 512 << 20: "512 MiB"}[size]
            print(f"| {op} | {label} | " + " | ".join(cells) + " | " + " | ".join(rat) + " |")
    print()
    print("#wrong over every size and repetition: "
          + ", ".join(f"{l} {wrong_total[l]}" for l in libs))
    if failed:
        print("no result rows (failed or timed out): " + ", ".join(failed))


if __name__ == "__main__":
    main()
