"""Calls parked for approval, and what they cost everyone else: `python3 benches/parked.py
target/release/flux-tools [SESSIONS] [PER_SESSION]` (default 100 × 100 = 10,000 parked).

Over HTTP: SESSIONS sessions each send PER_SESSION calls of a `requires_approval` tool (each
request keeps its connection open, as Streamable HTTP does while a call waits); over stdio one
session sends all of them. Before and after, a plain call's p50 (2,000 calls, after 500 to warm
up; over HTTP a new connection each, as a careless client makes them). Reported per face: the
two p50s, threads, and memory per parked call (RSS grown while they parked, over their number).
Each face runs its own gateway with a fresh runtime folder, so no earlier run's parked calls
are on its board.
"""
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

MANIFEST = """
[serve.limits]
connections_per_client = 20000
parked_per_session = 20000
parked_per_tenant = 20000

[tools.who]
kind = "scripted"
effect = "read"
output = { ok = true }

[tools.peek]
kind = "scripted"
effect = "read"
requires_approval = true
output = { seen = true }
[tools.peek.args]
what = { type = "string", required = true }
"""


def status(pid):
    d = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        d[k] = v.strip()
    return int(d["VmRSS"].split()[0]), int(d["Threads"])


def gateway(binary, tmp, *extra):
    env = dict(os.environ, XDG_RUNTIME_DIR=tmp)
    return subprocess.Popen(
        [binary, "--manifest", f"{tmp}/tools.toml", "mcp", "serve", "--lane-store", "memory", *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )


def call(i, tool, args):
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": tool, "arguments": args}}


INIT = {"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}


async def over_http(binary, tmp, sessions, per):
    p = gateway(binary, tmp, "--http", "127.0.0.1:0")
    line = (await asyncio.to_thread(p.stderr.readline)).decode()
    addr = line.split("http://")[1].split("/")[0]
    host, port = addr.split(":")

    async def post(body, sid=None, wait=True):
        r, w = await asyncio.open_connection(host, int(port))
        body = json.dumps(body)
        h = (f"POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n"
             f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n")
        if sid:
            h += f"Mcp-Session-Id: {sid}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
        w.write((h + "\r\n" + body).encode())
        await w.drain()
        if not wait:
            return (r, w)
        data = await r.read()
        w.close()
        return data.decode(errors="replace")

    async def session():
        head = await post(INIT)
        sid = [l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("mcp-session-id:")][0]
        await post({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        return sid

    async def plain(sid, n):
        lat = []
        for i in range(n):
            t = time.perf_counter()
            await post(call(i, "who", {}), sid)
            lat.append((time.perf_counter() - t) * 1000)
        return statistics.median(lat)

    probe = await session()
    await plain(probe, 500)
    idle = await plain(probe, 2000)
    sids = [await session() for _ in range(sessions)]
    before, _ = status(p.pid)
    held = []
    for s in sids:
        for j in range(per):
            held.append(await post(call(j, "peek", {"what": f"{s}-{j}"}), s, wait=False))
            if len(held) % 50 == 0:
                await asyncio.sleep(0.05)
    await asyncio.sleep(5)
    after, threads = status(p.pid)
    busy = await plain(probe, 2000)
    p.kill()
    return idle, busy, threads, (after - before) / (sessions * per)


def over_stdio(binary, tmp, n):
    p = gateway(binary, tmp)
    import queue
    import threading
    q = queue.Queue()

    def read():
        for line in p.stdout:
            m = json.loads(line)
            if "id" in m:
                q.put(m["id"])
    threading.Thread(target=read, daemon=True).start()

    def send(m):
        p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.flush()

    def plain(n, tag):
        lat = []
        for i in range(n):
            t = time.perf_counter()
            send(call(f"{tag}{i}", "who", {}))
            while q.get(timeout=30) != f"{tag}{i}":
                pass
            lat.append((time.perf_counter() - t) * 1000)
        return statistics.median(lat)

    send(INIT)
    q.get(timeout=10)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    plain(500, "w")
    idle = plain(2000, "i")
    before, _ = status(p.pid)
    for i in range(n):
        send(call(i, "peek", {"what": f"w{i}"}))
    time.sleep(8)
    after, threads = status(p.pid)
    busy = plain(2000, "b")
    p.kill()
    return idle, busy, threads, (after - before) / n


def main():
    binary = sys.argv[1]
    sessions = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    per = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    resource.setrlimit(resource.RLIMIT_NOFILE, (sessions * per + 1000,) * 2)
    rows = []
    for face in ("stdio", "http"):
        with tempfile.TemporaryDirectory() as tmp:
            open(f"{tmp}/tools.toml", "w").write(MANIFEST)
            if face == "http":
                r = asyncio.run(over_http(binary, tmp, sessions, per))
            else:
                r = over_stdio(binary, tmp, sessions * per)
            rows.append((face, *r))
    print(f"{sessions * per} calls parked for approval")
    print(f"{'face':6} {'idle p50 ms':>12} {'parked p50 ms':>14} {'ratio':>6} {'threads':>8} {'KB/parked':>10}")
    for face, idle, busy, threads, kb in rows:
        print(f"{face:6} {idle:12.3f} {busy:14.3f} {busy / idle:6.2f} {threads:8} {kb:10.1f}")


if __name__ == "__main__":
    main()
