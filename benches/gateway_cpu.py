#!/usr/bin/env python3
"""The CPU time a stdio MCP server takes a call, with N calls outstanding on one session.

  python3 benches/gateway_cpu.py [--calls 5000] [--outstanding 1,8,64] [--tool sleep] -- CMD...

CMD is the server to measure: `flux-tools --manifest M mcp serve --lane-store memory` (the
gateway, its upstream a child) or the upstream itself (`target/release/examples/mcp_test_server`).
One line client (this script: a writer thread keeps N `tools/call` requests outstanding, the
main thread reads the answers) drives one session; the figures are the server process's own
user + system time (`/proc/PID/stat`, its threads, not its children) over the calls, and the
calls a second. At one outstanding call the server sleeps between calls and every call runs
cold; with many, a wake-up reads several lines. `benches/mcp_gateway.rs` gives the machine's
CPU a call with rmcp's client and a process a client; this isolates one server process.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    """User + system seconds of process `pid` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def measure(cmd, calls, outstanding, tool):
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)

    def send(m):
        p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.flush()

    def answer():
        while True:
            line = json.loads(p.stdout.readline())
            if "id" in line:
                return line

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "gateway_cpu", "version": "1"}}})
    answer()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    # Warm up (the upstream started, the first call's allocations made).
    send({"jsonrpc": "2.0", "id": -1, "method": "tools/call",
          "params": {"name": tool, "arguments": {"ms": 0}}})
    answer()
    room = threading.Semaphore(outstanding)

    def writer():
        for i in range(calls):
            room.acquire()
            send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                  "params": {"name": tool, "arguments": {"ms": 0}}})

    c0, t0 = cpu(p.pid), time.monotonic()
    threading.Thread(target=writer, daemon=True).start()
    for _ in range(calls):
        line = answer()
        if "result" not in line or line["result"].get("isError"):
            sys.exit(f"gateway_cpu: call failed: {line}")
        room.release()
    wall, used = time.monotonic() - t0, cpu(p.pid) - c0
    p.stdin.close()
    p.wait()
    return calls / wall, used / calls * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--outstanding", default="1,8,64")
    ap.add_argument("--tool", default="sleep")
    ap.add_argument("cmd", nargs="+")
    a = ap.parse_args()
    print(f"{'outstanding':>11} {'calls/s':>9} {'server CPU µs a call':>21}")
    for n in (int(x) for x in a.outstanding.split(",")):
        rate, us = measure(a.cmd, a.calls, n, a.tool)
        print(f"{n:>11} {rate:>9.0f} {us:>21.1f}")


if __name__ == "__main__":
    main()
