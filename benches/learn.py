#!/usr/bin/env python3
"""Lanes that learn: the same batch through a lane of `concurrency` 2, C, 4C and "auto",
against an HTTP backend with a hidden capacity C.

The backend (started here, one thread a connection, HTTP/1.1 keep-alive) serves up to C calls at
once in BASE ms each, queues the rest in order (their latency grows), and answers 429 to a call
that finds 2C already in. Its capacity can change mid-run (--change SECONDS:C2).

For each lane setting it prints throughput (calls/s), p99 latency (ms), and the 429s the
backend sent (as a share of the calls), with one process, and with --procs N processes
sharing the lane on one Redis (the batch split between them). For "auto" it also prints when
the limit first reached C (convergence) and, with --change, when it was back within
[C2, 2·C2] after the change, from the lane's learned moves.

    python3 benches/learn.py [--calls 2000] [--capacity 16] [--base 50] [--procs 8]
                             [--change 3:8] [--only auto,16] [--bin PATH] [--no-redis] [--moves]

Targets (issue 71): auto ≥ 0.9× the best static throughput; its 429s ≤ 1 % of the calls
(static 4C ≥ 20 %); it converges within 3 s of start and within 5 s after C halves or
doubles; the same with the processes sharing the lane.
"""

import argparse
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class Backend:
    """The hidden capacity: `serving` of `capacity` busy, `inside` calls in (served or queued)."""

    def __init__(self, capacity, base_ms):
        self.capacity = capacity
        self.base = base_ms / 1000.0
        self.lock = threading.Condition()
        self.serving = 0
        self.inside = 0
        self.refused = 0
        self.served = 0
        self.queue = []

    def call(self):
        with self.lock:
            if self.inside >= 2 * self.capacity:
                self.refused += 1
                return False
            self.inside += 1
            me = object()
            self.queue.append(me)
            while self.queue[0] is not me or self.serving >= self.capacity:
                self.lock.wait()
            self.queue.pop(0)
            self.serving += 1
            self.lock.notify_all()
        time.sleep(self.base)
        with self.lock:
            self.serving -= 1
            self.inside -= 1
            self.served += 1
            self.lock.notify_all()
        return True

    def set_capacity(self, c):
        with self.lock:
            self.capacity = c
            self.lock.notify_all()


def serve(backend):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self):
            ok = backend.call()
            body = b'{"ok": true}' if ok else b"over capacity"
            self.send_response(200 if ok else 429)
            self.send_header("Content-Type", "application/json" if ok else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    srv = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis():
    if not shutil.which("redis-server"):
        return None, None
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, f"redis://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    return None, None


def manifest(url, setting, cap):
    lane = 'concurrency = "auto"\nmax = %d\nstart = 4' % (8 * cap) if setting == "auto" else f"concurrency = {setting}"
    return (
        "[concurrency]\nmax_concurrent_tools = 4096\n\n"
        f"[lanes.partner]\n{lane}\n\n"
        f'[tools.fetch]\nkind = "http"\nurl = "{url}"\neffect = "read"\nlanes = ["partner"]\n'
        'retries = 8\ntimeout = "30s"\n'
    )


def run(binary, setting, args, backend, url, store):
    """One setting: every process's document, and the wall time of the slowest."""
    folder = tempfile.mkdtemp(prefix="learn-")
    with open(os.path.join(folder, "tools.toml"), "w") as f:
        f.write(manifest(url, setting, args.capacity))
    procs = args.procs if store else 1
    per = args.calls // procs
    for p in range(procs):
        with open(os.path.join(folder, f"b{p}.jsonl"), "w") as f:
            for i in range(per):
                f.write(json.dumps({"id": f"p{p}c{i}", "tool": "fetch"}) + "\n")
    backend.set_capacity(args.capacity)
    backend.refused = backend.served = 0
    env = dict(os.environ, CI="true")
    cmd = lambda p: [binary, "run", f"b{p}.jsonl", "--format", "json", "-q", "--progress", "never"] + (
        ["--lane-store", store] if store else []
    )
    started = time.monotonic()
    children = [
        subprocess.Popen(cmd(p), cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        for p in range(procs)
    ]
    changer = None
    if args.change:
        at, to = args.change
        changer = threading.Timer(at, backend.set_capacity, (to,))
        changer.start()
    docs = [json.loads(c.communicate()[0] or b"{}") for c in children]
    wall = time.monotonic() - started
    if changer:
        changer.cancel()
    shutil.rmtree(folder, ignore_errors=True)
    return docs, wall, backend.refused


def moves(doc):
    for lane in doc.get("stats", {}).get("lanes", []):
        if lane.get("lane") == "lane:partner" and lane.get("learned"):
            return lane["learned"]["moves"]
    return []


def converged(ms, lo, hi, after=0):
    """When the limit was first within [lo, hi] at or after `after` ms (None: never)."""
    limit = None
    for at, to, _ in ms:
        limit = to
        if at >= after and lo <= limit <= hi:
            return at
    return None


def row(binary, setting, args, backend, url, store):
    docs, wall, refused = run(binary, setting, args, backend, url, store)
    durations = sorted(r.get("duration_ms", 0) for d in docs for r in d.get("results", []))
    ok = sum(1 for d in docs for r in d.get("results", []) if r.get("status") == "ok")
    calls = len(durations)
    p99 = durations[min(calls - 1, int(calls * 0.99))] if calls else 0
    out = {
        "lane": setting,
        "procs": args.procs if store else 1,
        "calls/s": round(calls / wall, 1),
        "ok": ok,
        "p99 ms": p99,
        "429s": refused,
        "429 %": round(100.0 * refused / max(1, calls), 1),
    }
    if setting == "auto":
        c = args.capacity
        first = converged(moves(docs[0]), c, 2 * c)
        out["reached C (s)"] = None if first is None else round(first / 1000, 2)
        if args.change:
            at, to = args.change
            back = converged(moves(docs[0]), to, 2 * to, int(at * 1000))
            out["after change (s)"] = None if back is None else round((back - at * 1000) / 1000, 2)
        if args.moves:
            out["moves"] = [f"{at / 1000:.2f}s→{to} {why}" for at, to, why in moves(docs[0])]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--capacity", type=int, default=16)
    ap.add_argument("--base", type=int, default=50, help="ms a call takes unloaded")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--change", type=lambda v: tuple(float(x) for x in v.split(":")), default=None)
    ap.add_argument("--only", default="")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "flux-tools"))
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--moves", action="store_true", help="print the learned lane's moves (first process)")
    args = ap.parse_args()
    if args.change:
        args.change = (args.change[0], int(args.change[1]))
    c = args.capacity
    settings = ["2", str(c), str(4 * c), "auto"]
    if args.only:
        settings = [s for s in settings if s in args.only.split(",")]
    backend = Backend(c, args.base)
    srv = serve(backend)
    url = f"http://127.0.0.1:{srv.server_address[1]}/fetch"
    redis, store = (None, None) if args.no_redis else start_redis()
    rows = []
    try:
        for s in settings:
            rows.append(row(args.bin, s, args, backend, url, None))
            print(json.dumps(rows[-1]), flush=True)
        if store:
            for s in settings:
                rows.append(row(args.bin, s, args, backend, url, store))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        if redis:
            redis.kill()
        srv.shutdown()
    for procs in sorted({r["procs"] for r in rows}):
        group = [r for r in rows if r["procs"] == procs]
        best = max((r["calls/s"] for r in group if r["lane"] != "auto"), default=0)
        for r in group:
            if r["lane"] == "auto" and best:
                print(f"procs {procs}: auto {r['calls/s']} calls/s = {r['calls/s'] / best:.2f}× the best static ({best}); 429s {r['429 %']} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
