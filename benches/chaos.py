#!/usr/bin/env python3
"""Chaos: SIGKILL a 200-call run at random points, resume it, kill it again, and finish it.

The run mixes reads, chained writes (not idempotent), concurrent idempotent writes and a
`parallel_safe = false` tool. Every write appends "CALL_ID IDEMPOTENCY_KEY" to a ledger and
fsyncs it (the effect). After the last resume finishes, it counts:

  duplicate write effects  a key written twice by a tool that is not idempotent (must be 0)
  lost results             calls without a result in the finished run's document (must be 0)
  indeterminate            calls reported `indeterminate` (in flight at a kill, not re-sent)
  processes left behind    tool processes (the effect script, its `sleep`) still running
                           30 ms after a kill (must be 0)

    python3 benches/chaos.py [--runs 4] [--kills 4] [--calls 200] [--seed 1] [--bin PATH]
                             [--shared] [--verify]

With --verify, the chained writes name a probe (`verify = "was_written"`: it reads the ledger
for the write's idempotency key), so a write in flight at a kill is settled on resume — applied,
or sent again once — and `indeterminate` must be 0 too.

With --shared, the journal is in Redis (a redis-server with an append-only file, started
here) and every attempt runs on another "machine": a fresh working directory with no local
state, the same run id (`--run-id chaos-N --journal redis://…`) and the same ledger.

Exit status 1 if a must-be-0 figure is not 0 (with --verify, `indeterminate` too).
"""

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LEDGER_TOOL = """#!/bin/sh
# One effect: a line in the ledger, on disk before the tool answers — and a moment between the
# two, where a kill leaves an effect that landed without its answer.
sleep "$1"
printf '%s %s\\n' "$FLUX_CALL_ID" "$FLUX_IDEMPOTENCY_KEY" >> {ledger}
sync {ledger}
sleep 0.05
echo '{{"ok": true}}'
"""

MANIFEST = """
[concurrency]
max_concurrent_tools = 8

[tools.read]
kind = "scripted"
effect = "read"
latency = "40ms"

[tools.chain]
kind = "command"
effect = "write"
idempotent = false
stdin = "none"
command = ["./effect.sh", "0.05"]

[tools.cwrite]
kind = "command"
effect = "write"
idempotent = true
concurrent_writes = true
stdin = "none"
command = ["./effect.sh", "0.08"]

[tools.solo]
kind = "command"
effect = "write"
idempotent = true
parallel_safe = false
stdin = "none"
command = ["./effect.sh", "0.03"]
"""


# The chained writes' probe (--verify): whether the ledger holds the write's key.
PROBE_TOOL = """#!/bin/sh
if grep -q " $FLUX_IDEMPOTENCY_KEY\\$" {ledger} 2>/dev/null; then
  echo '{{"applied": true}}'
else
  echo '{{"applied": false}}'
fi
"""

VERIFY = """
[tools.was_written]
kind = "command"
effect = "read"
stdin = "none"
command = ["./probe.sh"]
"""


def batch(n, rng):
    lines = []
    for i in range(n):
        tool = rng.choices(["read", "chain", "cwrite", "solo"], weights=[5, 3, 3, 1])[0]
        lines.append(json.dumps({"id": f"k{i}", "tool": tool, "args": {"n": i}}))
    return "\n".join(lines) + "\n"


def machine(work, name, ledger, batch_text, verify=False):
    """A working directory with the manifest, the tool (writing to `ledger`), its probe with
    `verify`, and the batch."""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    manifest = MANIFEST
    if verify:
        manifest = manifest.replace('command = ["./effect.sh", "0.05"]',
                                    'command = ["./effect.sh", "0.05"]\nverify = "was_written"')
        manifest += VERIFY
    with open(os.path.join(d, "tools.toml"), "w") as f:
        f.write(manifest)
    for name, text in [("effect.sh", LEDGER_TOOL), ("probe.sh", PROBE_TOOL)]:
        tool = os.path.join(d, name)
        with open(tool, "w") as f:
            f.write(text.format(ledger=ledger))
        os.chmod(tool, 0o755)
    with open(os.path.join(d, "batch.jsonl"), "w") as f:
        f.write(batch_text)
    return d


def in_work(work):
    """The processes whose working directory is inside `work`: (pid, is the watchdog)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                watchdog = b"__reaper" in f.read()
        except OSError:
            continue
        if state != "Z" and (cwd == work or cwd.startswith(work + "/")):
            found.append((pid, watchdog))
    return found


def left_behind(work):
    """The killed run's tools still running 30 ms after the kill — or, when a watchdog of the
    run is still at work then, once it has finished (it kills what the run left)."""
    time.sleep(0.03)
    until = time.monotonic() + 5
    while any(w for _, w in in_work(work)) and time.monotonic() < until:
        time.sleep(0.01)
    return sum(1 for _, w in in_work(work) if not w)


def one_run(binary, work, calls, kills, rng, shared, verify=False):
    """Kill a run `kills` times and finish it; `shared`: (Redis URL, run id), each attempt on
    a new machine."""
    batch_text = batch(calls, rng)
    ledger = os.path.join(work, "ledger")
    journal = os.path.join(work, "run.journal")
    killed = 0
    behind = 0
    first = True
    env = dict(os.environ, FLUX_TOOLS_LEASE_MS="500")
    while True:
        d = machine(work, f"m{killed}" if shared else "m", ledger, batch_text, verify)
        args = [binary, "run", "batch.jsonl", "--format", "json", "-q", "--progress", "never"]
        if shared:
            args += ["--journal", shared[0], "--run-id", shared[1]]
        else:
            args += ["--journal", journal] if first else ["--resume", journal]
        proc = subprocess.Popen(args, cwd=d, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        if killed < kills:
            time.sleep(rng.uniform(0.05, 1.2))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                behind += left_behind(work)
                killed += 1
                first = False
                continue
        out, err = proc.communicate(timeout=300)
        return json.loads(out), (killed, behind), proc.returncode, err.decode()


def redis(work):
    """A redis-server with an append-only file, fsynced at every write: its URL and process."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                             "--dir", work], stdout=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return f"redis://127.0.0.1:{port}", proc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "flux-tools"))
    ap.add_argument("--shared", action="store_true",
                    help="journal in Redis, each attempt on a fresh working directory")
    ap.add_argument("--verify", action="store_true",
                    help="the chained writes have a probe: nothing may be left indeterminate")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    totals = collections.Counter()
    store = tempfile.TemporaryDirectory()
    url, server = redis(store.name) if a.shared else (None, None)
    for run in range(a.runs):
        with tempfile.TemporaryDirectory() as work:
            shared = (url, f"chaos-{a.seed}-{run}") if a.shared else None
            doc, (killed, behind), code, err = one_run(a.bin, work, a.calls, a.kills, rng, shared,
                                                       a.verify)
            results = doc["results"]
            by_id = {r["id"]: r for r in results}
            ledger = collections.Counter()
            if os.path.exists(os.path.join(work, "ledger")):
                with open(os.path.join(work, "ledger")) as f:
                    for line in f:
                        ledger[tuple(line.split())] += 1
            not_idempotent = {r["id"] for r in results if r["tool"] == "chain"}
            dupes = sum(c - 1 for (cid, _), c in ledger.items() if c > 1 and cid in not_idempotent)
            lost = a.calls - len(by_id) + sum(
                1 for r in results if r["status"] == "never_dispatched"
                and (r["error"] or {}).get("kind") == "run_ended")
            totals.update({
                "runs": 1, "kills": killed, "duplicate write effects": dupes, "lost results": lost,
                "processes left behind": behind,
                "indeterminate": sum(1 for r in results if r["status"] == "indeterminate"),
                "settled applied": sum(1 for r in results if r.get("settled") == "applied"),
                "settled not applied": sum(1 for r in results if r.get("settled") == "not_applied"),
                "effects": sum(ledger.values()),
                "idempotent re-sends": sum(c - 1 for (cid, _), c in ledger.items()
                                           if c > 1 and cid not in not_idempotent),
            })
            print(f"run {run + 1}: {killed} kills, exit {code}, {len(results)} results, "
                  f"{dupes} duplicate effects, {lost} lost, {behind} processes left behind",
                  file=sys.stderr)
    if server:
        server.kill()
    print(json.dumps(dict(totals), indent=2))
    bad = totals["duplicate write effects"] or totals["lost results"] or totals["processes left behind"]
    bad = bad or (a.verify and totals["indeterminate"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
