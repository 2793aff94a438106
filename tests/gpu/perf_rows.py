#!/usr/bin/env python3
"""One markdown table row comparing ccl-perf / nccl-tests logs of the same single size.

    perf_rows.py LABEL[,LABEL...] BASE.log OTHER.log [OTHER.log ...]

prints  | labels | base time | base busbw | (time, busbw of each other log) | (busbw ratio,
time ratio of each other log against the base) |  -- times in us, busbw in GB/s, out-of-place
column; "-" where a log has no row (a failed run). `perf_rows.py --header NAME[,NAME...]`
prints the matching header: NAME per log, base first.
"""
import re
import sys

ROW = re.compile(r"\s+(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+[\d.]+\s+([\d.]+)")


def first_row(path):
    """(time us, busbw GB/s) of the first result row, or None."""
    try:
        with open(path) as f:
            for line in f:
                m = ROW.match(line)
                if m:
                    return float(m.group(2)), float(m.group(3))
    except OSError:
        pass
    return None


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def main(argv):
    if len(argv) >= 3 and argv[1] == "--header":
        labels, names = argv[2].split(","), argv[3].split(",") if len(argv) > 3 else []
        cols = labels + [f"{n} {k}" for n in names for k in ("us", "GB/s")]
        cols += [f"{n}/{names[0]} {k}" for n in names[1:] for k in ("busbw", "time")]
        print("| " + " | ".join(cols) + " |")
        print("|" + "|".join(["---"] * len(labels) + ["---:"] * (len(cols) - len(labels))) + "|")
        return 0
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    labels, logs = argv[1].split(","), argv[2:]
    rows = [first_row(p) for p in logs]
    cells = list(labels)
    for r in rows:
        cells += [f"{r[0]:g}", f"{r[1]:g}"] if r else ["-", "-"]
    base = rows[0]
    for r in rows[1:]:
        cells.append(ratio(r and r[1], base and base[1]))
        cells.append(ratio(r and r[0], base and base[0]))
    print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
