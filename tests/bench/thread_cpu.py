#!/usr/bin/env python3
"""Per-thread CPU use of running processes, sampled from /proc (no perf needed).

thread_cpu.py PATTERN DELAY_S WINDOW_S: waits DELAY_S, then prints for every process whose
command line contains PATTERN the share of one core each thread used over WINDOW_S seconds
(utime+stime deltas from /proc/PID/task/TID/stat), busiest first. A thread near 100% is the
serial bottleneck of a pipeline that more threads elsewhere cannot speed up."""
import os, sys, time

def procs(pattern):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if pattern in cmd and "thread_cpu" not in cmd and "mpirun" not in cmd:
            out.append(int(p))
    return out

def sample(pid):
    ticks = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                stat = open(f"/proc/{pid}/task/{t}/stat").read()
                name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            except OSError:
                continue
            f = stat.rsplit(")", 1)[1].split()
            ticks[int(t)] = (name, int(f[11]) + int(f[12]))
    except OSError:
        pass
    return ticks

def main():
    pattern, delay, window = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    time.sleep(delay)
    pids = procs(pattern)
    before = {p: sample(p) for p in pids}
    t0 = time.time(); time.sleep(window); dt = time.time() - t0
    hz = os.sysconf("SC_CLK_TCK")
    for p in pids:
        after = sample(p)
        rows = []
        for tid, (name, t) in after.items():
            b = before[p].get(tid, (name, t))[1]
            rows.append(((t - b) / hz / dt * 100, tid, name))
        rows.sort(reverse=True)
        print(f"pid {p}: " + ", ".join(f"{n}[{tid}] {u:.0f}%" for u, tid, n in rows if u >= 3))

if __name__ == "__main__":
    main()
