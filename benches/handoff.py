#!/usr/bin/env python3
"""How well a shared lane hands a freed permit to the next process.

P flux-tools processes × N command calls through one tool lane of 3 (`[concurrency.per_tool]`),
each call logging its start and end (ns) around a `sleep`; the same P × N calls from one process
on the memory store are the control. Reports, per store and call length: lane utilisation (tool
time ÷ (limit × wall)), the peak in flight seen in the log (never above the limit), and the
slowest process's wall time over the fastest's (fairness).

    python3 benches/handoff.py                 # builds the release binary first
    python3 benches/handoff.py --procs 8 --calls 40 --stores local,redis --lengths 0.01,0.05
    python3 benches/handoff.py --no-build --flux /path/to/older/flux-tools   # an A/B of two builds
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLUX = os.path.join(ROOT, "target", "release", "flux-tools")
LIMIT = 3


def manifest(work, log):
    path = os.path.join(work, "tools.toml")
    with open(path, "w") as f:
        f.write(f"""[concurrency]
max_concurrent_tools = 64
[concurrency.per_tool]
work = {LIMIT}

[tools.work]
kind = "command"
effect = "read"
command = ["sh", "-c", 'echo "s $(date +%s%N)" >> {log}; sleep $1; echo "e $(date +%s%N)" >> {log}', "w", "{{s}}"]
stdin = "none"
""")
    return path


def batch(work, n, length, tag):
    path = os.path.join(work, f"b-{tag}.jsonl")
    with open(path, "w") as f:
        for i in range(n):
            f.write('{"tool": "work", "args": {"s": "%s", "i": %d}}\n' % (length, i))
    return path


def analyse(log):
    starts, ends = [], []
    with open(log) as f:
        for line in f:
            kind, _, t = line.partition(" ")
            (starts if kind == "s" else ends).append(int(t))
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    busy = sum(ends) - sum(starts)
    wall = max(ends) - min(starts)
    return busy / (LIMIT * wall), peak, len(starts)


def run(work, store, procs, calls, length):
    log = os.path.join(work, f"log-{store.split(':')[0]}-{procs}-{length}")
    if os.path.exists(log):
        os.remove(log)
    m = manifest(work, log)
    b = batch(work, calls, length, f"{procs}-{length}")
    cmd = [FLUX, "--manifest", m, "run", b, "-q", "--format", "jsonl", "--lane-store", store]
    t0 = time.perf_counter()
    children = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL) for _ in range(procs)]
    finished = []
    left = {c.pid for c in children}
    while left:
        pid, _ = os.wait()  # whichever ends first: each process's own finishing time
        if pid in left:
            left.discard(pid)
            finished.append(time.perf_counter() - t0)
    util, peak, n = analyse(log)
    assert n == procs * calls, (n, procs * calls)
    return util, peak, max(finished) / min(finished)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--stores", default="local,redis")
    ap.add_argument("--lengths", default="0.01,0.05")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--flux", help="the flux-tools binary to measure (default: this tree's release build)")
    args = ap.parse_args()
    if args.flux:
        global FLUX
        FLUX = os.path.abspath(args.flux)
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "flux-tools"], cwd=ROOT, check=True)
    server = None
    stores = args.stores.split(",")
    if "redis" in stores:
        if shutil.which("redis-server"):
            server = subprocess.Popen(["redis-server", "--port", "16391", "--save", "", "--appendonly", "no"],
                                      stdout=subprocess.DEVNULL)
            time.sleep(0.5)
        else:
            print("NOTICE: redis-server not installed; the redis store is skipped")
        stores = [s if s != "redis" else "redis://127.0.0.1:16391" for s in stores if s != "redis" or server]
    print(f"{args.procs} processes × {args.calls} calls through one tool lane of {LIMIT}; "
          f"control: the same {args.procs * args.calls} calls from one process on the memory store")
    try:
        with tempfile.TemporaryDirectory() as work:
            for length in args.lengths.split(","):
                control, cpeak, _ = run(work, "memory", 1, args.procs * args.calls, length)
                print(f"\n## calls of {float(length) * 1000:.0f} ms")
                print(f"  {'control (1 process, memory)':<34} utilisation {control * 100:5.1f} %  peak {cpeak}")
                for store in stores:
                    util, peak, spread = run(work, store, args.procs, args.calls, length)
                    name = store if not store.startswith("redis") else "redis"
                    print(f"  {name + f' ({args.procs} processes)':<34} utilisation {util * 100:5.1f} %  peak {peak}  "
                          f"slowest/fastest process {spread:.2f}  ({(control - util) * 100:+.1f} points below control)")
    finally:
        if server:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
