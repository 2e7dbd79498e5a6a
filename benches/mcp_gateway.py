"""Latency a gateway adds to an MCP tool call, and calls per second, side by side in one run.

    target/sqlite-venv/bin/python benches/mcp_gateway.py [--calls N] [--flux PATH] [--server PATH]

The upstream is the project's own rmcp test server (`cargo build --release --example
mcp_test_server`), tool `sleep` with `ms = 0`. Rows: the upstream called directly over stdio,
and through `flux-tools mcp serve` over stdio (and over Streamable HTTP). Each row: p50 and p99
of one call's latency with 1 client calling in sequence and with 8 clients at once, and calls/s
at 1, 8 and 64 clients (each a session of its own, concurrent calls on it). A peer gateway
(`supergateway`, PyPI `mcp-proxy`, the `mcp-proxy` crate) is added as a row when its launcher is
given in $PEER_<NAME> as a command line that serves the upstream on stdio.
"""

import argparse
import asyncio
import os
import shlex
import statistics
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def session_calls(params, n, concurrent):
    """Open one session; make `n` calls, `concurrent` at a time; per-call latencies (s)."""
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            await s.call_tool("sleep", {"ms": 0})  # warm up
            lat = []
            sem = asyncio.Semaphore(concurrent)

            async def one():
                async with sem:
                    t = time.perf_counter()
                    res = await s.call_tool("sleep", {"ms": 0})
                    assert not res.isError, res
                    lat.append(time.perf_counter() - t)

            await asyncio.gather(*[one() for _ in range(n)])
            return lat


async def row(params, calls):
    out = {}
    one = await session_calls(params, calls, 1)
    out["p50_1"], out["p99_1"] = pct(one, 50), pct(one, 99)
    eight = await session_calls(params, calls, 8)
    out["p50_8"], out["p99_8"] = pct(eight, 50), pct(eight, 99)
    for clients in (1, 8, 64):
        per = max(calls // clients, 20)
        t = time.perf_counter()
        await asyncio.gather(*[session_calls(params, per, 4) for _ in range(clients)])
        out[f"cps_{clients}"] = clients * per / (time.perf_counter() - t)
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] * 1000


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--flux", default="target/release/flux-tools")
    ap.add_argument("--server", default="target/release/examples/mcp_test_server")
    a = ap.parse_args()
    server = os.path.abspath(a.server)
    tmp = tempfile.mkdtemp()
    manifest = os.path.join(tmp, "tools.toml")
    with open(manifest, "w") as f:
        f.write(f'[concurrency]\nmax_concurrent_tools = 64\n\n[mcp_servers.t]\ncommand = ["{server}"]\n\n'
                '[tools.sleep]\nkind = "mcp"\nserver = "t"\n')
    rows = [("direct", StdioServerParameters(command=server, args=[])),
            ("flux-tools mcp serve", StdioServerParameters(
                command=os.path.abspath(a.flux),
                args=["--manifest", manifest, "mcp", "serve", "--lane-store", "memory"]))]
    for name, cmd in sorted((k[5:].lower(), v) for k, v in os.environ.items() if k.startswith("PEER_")):
        argv = shlex.split(cmd.replace("{server}", server))
        rows.append((name, StdioServerParameters(command=argv[0], args=argv[1:])))
    results = [(name, await row(p, a.calls)) for name, p in rows]
    base = results[0][1]
    print(f"{'':24}{'p50 1c':>9}{'p99 1c':>9}{'p50 8c':>9}{'p99 8c':>9}{'calls/s 1':>11}{'8':>9}{'64':>9}   (ms; added over direct)")
    for name, r in results:
        print(f"{name:24}{r['p50_1']:9.3f}{r['p99_1']:9.3f}{r['p50_8']:9.3f}{r['p99_8']:9.3f}"
              f"{r['cps_1']:11.0f}{r['cps_8']:9.0f}{r['cps_64']:9.0f}   "
              f"+{r['p50_1'] - base['p50_1']:.3f} p50 1c, +{r['p50_8'] - base['p50_8']:.3f} p50 8c")


asyncio.run(main())
