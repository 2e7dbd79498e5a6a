#!/usr/bin/env python3
"""Benchmarks for flux-tools, printed side by side with peers in one run.

  python3 benches/compare.py            # everything (a few minutes on 2 cores)
  python3 benches/compare.py --quick    # fewer repetitions

Builds the release binary, the raw floors (benches/spawn_floor.rs) and the binary of a baseline
commit (--baseline, default 6f388f9: built once from git in target/bench-baseline/REV/), then
prints medians of several runs:
  * N /bin/true command calls at concurrency 1, 8, 64: flux-tools and the baseline vs the raw
    floors (a tokio spawn loop, J threads, and the tokio loop on the blocking pool; the ratio is to
    the best of them), xargs -P,
    GNU parallel and rust-parallel -k (each when installed);
  * sleep batches (200 x 50 ms at concurrency 8 and 64): makespan against ceil(200/J) x 50 ms;
  * 100,000 zero-latency scripted calls at J = 64, beside the baseline: calls per second and
    peak RSS;
  * plan of a 100,000-call batch with references: time and peak RSS;
  * HTTP GETs on a loopback keep-alive server (benches/http_server.rs) at concurrency 1, 8, 64:
    flux-tools calls/s beside a load generator's (oha or wrk) on the same endpoint;
  * 100,000 zero-latency scripted calls through a tool lane of 8 per lane store (memory, local,
    redis when redis-server is installed): calls per second and peak RSS;
  * 1,000,000 calls streamed as JSON Lines through stdin: time and peak RSS;
  * the cost of one call in a long-lived engine (benches/call_overhead.rs): p50 and p99.
The machine is noisy: compare ratios within one run, not absolute figures across runs.
"""
import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLUX = os.path.join(ROOT, "target", "release", "flux-tools")
FLOOR = os.path.join(ROOT, "target", "release", "examples", "spawn_floor")
HTTP_SERVER = os.path.join(ROOT, "target", "release", "examples", "http_server")


def build():
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "flux-tools", "--example", "spawn_floor", "--example", "http_server",
                    "--example", "mcp_test_server", "--example", "call_overhead"],
                   cwd=ROOT, check=True)


BASELINE = "6f388f9"
# The label of the baseline's rows (set from --baseline).
BASELINE_NAME = [BASELINE]


def build_baseline(rev):
    """The binary of commit `rev`, built from git in a scratch folder (kept, so a second run
    reuses it): target/bench-baseline/REV/{src,target}. `None` when git or the build fails."""
    scratch = os.path.join(ROOT, "target", "bench-baseline", rev)
    binary = os.path.join(scratch, "target", "release", "flux-tools")
    if os.path.exists(binary):
        return binary
    src = os.path.join(scratch, "src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    try:
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        print(f"building {rev} in {scratch} (once; a few minutes)", file=sys.stderr)
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "flux-tools"], cwd=src, check=True,
                       env=dict(os.environ, CARGO_TARGET_DIR=os.path.join(scratch, "target")))
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"cannot build {rev}: {e}; its column is left out", file=sys.stderr)
        return None
    return binary


GNU_TIME = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None


def timed(cmd, **kw):
    """Wall seconds and peak RSS (MB) of one command.

    The peak comes from GNU time when it is installed: a child forked from this Python process
    starts with Python's own resident size as its high-water mark (which json.load of a large
    results file makes 150 MB), so wait4's ru_maxrss would report that, not the command's.
    """
    t0 = time.perf_counter()
    if GNU_TIME:
        with tempfile.NamedTemporaryFile("r") as rss_file:
            p = subprocess.Popen([GNU_TIME, "-q", "-f", "%M", "-o", rss_file.name] + cmd,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
            status = p.wait()
            wall = time.perf_counter() - t0
            text = rss_file.read().strip().splitlines()
            rss = int(text[-1]) / 1024.0 if text and text[-1].isdigit() else float("nan")
    else:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
        _, st, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        status, rss = os.waitstatus_to_exitcode(st), usage.ru_maxrss / 1024.0
    if status not in (0, 1):
        raise RuntimeError(f"{cmd[0]} exited {status}")
    return wall, rss


def median_of(reps, cmd, **kw):
    runs = [timed(cmd, **kw) for _ in range(reps)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def command_throughput(work, n, reps, baseline=None):
    manifest = os.path.join(work, "cmd.toml")
    write(manifest, '[tools.t]\nkind = "command"\neffect = "read"\ncommand = ["/bin/true"]\nstdin = "none"\n')
    batch = os.path.join(work, "true.jsonl")
    write(batch, "".join('{"tool":"t"}\n' for _ in range(n)))
    inputs = os.path.join(work, "inputs.txt")
    write(inputs, "".join(f"{i}\n" for i in range(n)))
    print(f"\n## {n} /bin/true command calls (median of {reps}, interleaved; calls/s, ratio to the better "
          f"raw floor: target 0.95)")
    print(f"{'J':>4}  {'tool':<16} {'calls/s':>10} {'x floor':>8}")
    for j in (1, 8, 64):
        run = ["run", batch, "--format", "jsonl", "-q", "--max-concurrent-tools", str(j), "--progress", "never"]
        cmds = [
            ("tokio floor", [FLOOR, str(n), str(j), "/bin/true"]),
            ("threads floor", [FLOOR, "--threads", str(n), str(j), "/bin/true"]),
            ("blocking floor", [FLOOR, "--blocking", str(n), str(j), "/bin/true"]),
            ("flux-tools", [FLUX, "--manifest", manifest] + run),
        ]
        if baseline:
            cmds.append((BASELINE_NAME[0], [baseline, "--manifest", manifest] + run))
        cmds.append(("xargs -P", ["sh", "-c", f"xargs -P {j} -n 1 /bin/true < {inputs}"]))
        if shutil.which("parallel"):
            cmds.append(("parallel", ["sh", "-c", f"parallel -j {j} /bin/true < {inputs}"]))
        if shutil.which("rust-parallel"):
            cmds.append(("rust-parallel -k", ["sh", "-c", f"rust-parallel -k -j {j} /bin/true < {inputs}"]))
        # Interleaved rounds (each tool once per round, in turn), so that a slow spell of this
        # noisy machine lands on every tool alike rather than on whichever ran then.
        walls = {name: [] for name, _ in cmds}
        for _ in range(reps):
            for name, cmd in cmds:
                walls[name].append(timed(cmd)[0])
        floor = min(statistics.median(walls[f]) for f in ("tokio floor", "threads floor", "blocking floor"))
        for name, _ in cmds:
            wall = statistics.median(walls[name])
            print(f"{j:>4}  {name:<16} {n / wall:>10.0f} {floor / wall:>8.2f}")


def one_shot(work, reps, baseline=None):
    """A model's turn as the loop `model | flux-tools run --emit openai | model` pays it: one
    process reads an OpenAI reply with one `/bin/true` call and answers with its tool message.
    The floor is one `/bin/true` started and waited for by the raw threads loop."""
    manifest = os.path.join(work, "one.toml")
    write(manifest, '[tools.t]\nkind = "command"\neffect = "read"\ncommand = ["/bin/true"]\nstdin = "none"\n')
    reply = os.path.join(work, "reply.json")
    call = {"id": "call_0", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    write(reply, json.dumps({"id": "r", "object": "chat.completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]}))
    run = ["run", reply, "--emit", "openai", "-q"]
    cmds = [("threads floor", [FLOOR, "--threads", "1", "1", "/bin/true"]),
            ("flux-tools", [FLUX, "--manifest", manifest] + run)]
    if baseline:
        cmds.append((BASELINE_NAME[0], [baseline, "--manifest", manifest] + run))
    rounds = reps * 20
    walls = {name: [] for name, _ in cmds}
    for _ in range(rounds):
        for name, cmd in cmds:
            walls[name].append(timed(cmd)[0] * 1000)
    print(f"\n## one model turn, one process: an OpenAI reply with one /bin/true call in, its tool "
          f"message out (median of {rounds}, interleaved; ms)")
    for name, _ in cmds:
        print(f"  {name:<16} {statistics.median(walls[name]):>6.2f} ms")


def sleep_makespan(work, reps):
    n, ms = 200, 50
    manifest = os.path.join(work, "sleep.toml")
    write(manifest, '[tools.s]\nkind = "command"\neffect = "read"\ncommand = ["sleep", "0.05"]\nstdin = "none"\n')
    batch = os.path.join(work, "sleep.jsonl")
    write(batch, "".join('{"tool":"s"}\n' for _ in range(n)))
    print(f"\n## {n} calls sleeping {ms} ms (median of {reps}; makespan vs the lower bound)")
    print(f"{'J':>4}  {'bound':>8} {'floor':>8} {'flux':>8} {'flux/floor':>10}")
    for j in (8, 64):
        bound = math.ceil(n / j) * ms / 1000
        floors, fluxes = [], []
        for _ in range(reps):  # interleaved, as above
            floors.append(timed([FLOOR, str(n), str(j), "sleep", "0.05"])[0])
            fluxes.append(timed([FLUX, "--manifest", manifest, "run", batch, "--format", "jsonl", "-q",
                                 "--max-concurrent-tools", str(j), "--progress", "never"])[0])
        floor, flux = statistics.median(floors), statistics.median(fluxes)
        print(f"{j:>4}  {bound:>7.2f}s {floor:>7.2f}s {flux:>7.2f}s {flux / floor:>10.3f}")


def scripted_throughput(work, reps, baseline=None):
    """100,000 zero-latency scripted calls at J = 64, interleaved with the baseline's binary."""
    import json
    n = 100_000
    manifest = os.path.join(work, "scripted.toml")
    write(manifest, '[tools.z]\nkind = "scripted"\neffect = "read"\n')
    batch = os.path.join(work, "zero.jsonl")
    write(batch, "".join('{"tool":"z"}\n' for _ in range(n)))
    results = os.path.join(work, "zero.json")
    binaries = [("flux-tools", FLUX)] + ([(BASELINE_NAME[0], baseline)] if baseline else [])
    walls = {name: [] for name, _ in binaries}
    rss, sched = {name: [] for name, _ in binaries}, {name: [] for name, _ in binaries}
    for _ in range(reps):
        for name, binary in binaries:
            cmd = [binary, "--manifest", manifest, "run", batch, "--format", "jsonl", "-q", "--progress", "never",
                   "--max-concurrent-tools", "64"]
            w, r = timed(cmd)
            walls[name].append(w)
            rss[name].append(r)
            # The run's own figure from a run that also writes the whole document (untimed:
            # writing and syncing 30 MB of JSON is not the cost of a call).
            subprocess.run(cmd + ["--output", results], stdout=subprocess.DEVNULL, check=True)
            with open(results) as f:
                sched[name].append(json.load(f)["stats"]["wall_ms"] / 1000)
    print(f"\n## {n:,} zero-latency scripted calls at J = 64 (median of {reps}, interleaved; target 250,000 calls/s)")
    print("  end to end: read, parse, plan, run, print each result as a JSON line; the run: stats.wall_ms")
    print(f"  {'binary':<18} {'end to end':>12} {'µs a call':>10} {'the run':>12} {'peak RSS':>9}  walls")
    for name, _ in binaries:
        wall, run = statistics.median(walls[name]), statistics.median(sched[name])
        spread = "–".join(f"{w:.2f}" for w in (min(walls[name]), max(walls[name])))
        print(f"  {name:<18} {n / wall:>10,.0f}/s {wall * 1e6 / n:>10.2f} {n / run:>10,.0f}/s {max(rss[name]):>7.0f}MB"
              f"  {spread} s")
    if baseline:
        now, then = statistics.median(walls["flux-tools"]), statistics.median(walls[BASELINE_NAME[0]])
        print(f"  flux-tools takes {now / then:.2f}× the time of {BASELINE_NAME[0]}")


def call_overhead(reps):
    """One call's p50/p99 through a long-lived engine and through run --turns (call_overhead.rs)."""
    print("\n## the cost of one call (benches/call_overhead.rs)")
    subprocess.run([os.path.join(ROOT, "target", "release", "examples", "call_overhead"), str(4000 * reps)], check=True)


def plan_time(work, reps, baseline=None):
    n = 100_000
    manifest = os.path.join(work, "scripted.toml")
    batch = os.path.join(work, "plan.jsonl")
    lines = []
    for i in range(n):
        if i % 10 == 9:
            lines.append('{"tool":"z","args":{"x":"${c%d}"}}\n' % i)
        else:
            lines.append('{"tool":"z"}\n')
    write(batch, "".join(lines))
    wall, rss = median_of(reps, [FLUX, "--manifest", manifest, "plan", batch, "--format", "json", "-q"])
    print(f"\n## plan of {n} calls with references (median of {reps})")
    print(f"  {wall * 1000:.0f} ms, peak RSS {rss:.0f} MB (target: < 1 s)")
    if baseline:
        wall, rss = median_of(reps, [baseline, "--manifest", manifest, "plan", batch, "--format", "json", "-q"])
        print(f"  {BASELINE_NAME[0]}: {wall * 1000:.0f} ms, peak RSS {rss:.0f} MB")


def http_throughput(work, reps):
    n, port = 20_000, 18766
    server = subprocess.Popen([HTTP_SERVER, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/x"
        manifest = os.path.join(work, "http.toml")
        write(manifest, f'[tools.h]\nkind = "http"\neffect = "read"\nurl = "{url}"\n')
        batch = os.path.join(work, "http.jsonl")
        write(batch, "".join('{"tool":"h"}\n' for _ in range(n)))
        print(f"\n## HTTP GET on a loopback keep-alive server ({n} calls for flux-tools; median of {reps})")
        print(f"{'J':>4}  {'flux-tools':>12} {'load gen':>12} {'ratio':>7}")
        for j in (1, 8, 64):
            wall, _ = median_of(reps, [FLUX, "--manifest", manifest, "run", batch, "--format", "jsonl", "-q",
                                      "--max-concurrent-tools", str(j), "--progress", "never"])
            flux = n / wall
            gen = None
            if shutil.which("oha"):
                out = subprocess.run(["oha", "-n", str(n), "-c", str(j), "--no-tui", "-j", url],
                                     capture_output=True, text=True).stdout
                import json
                gen = json.loads(out)["summary"]["requestsPerSec"]
                name = "oha"
            elif shutil.which("wrk"):
                out = subprocess.run(["wrk", "-t", str(min(j, 2)), "-c", str(j), "-d", "3s", url],
                                     capture_output=True, text=True).stdout
                for line in out.splitlines():
                    if line.startswith("Requests/sec:"):
                        gen = float(line.split()[1])
                name = "wrk"
            gen_text = f"{gen:>12.0f}" if gen else f"{'-':>12}"
            ratio = f"{flux / gen:>7.2f}" if gen else f"{'-':>7}"
            print(f"{j:>4}  {flux:>12.0f} {gen_text} {ratio}")
        if not (shutil.which("oha") or shutil.which("wrk")):
            print("  (no load generator installed: apt-get install wrk, or cargo install oha)")
    finally:
        server.kill()


def lane_stores(work, reps):
    n = 100_000
    manifest = os.path.join(work, "lanes.toml")
    write(manifest, '[concurrency.per_tool]\nz = 8\n[tools.z]\nkind = "scripted"\neffect = "read"\n')
    batch = os.path.join(work, "lanes.jsonl")
    write(batch, "".join('{"tool":"z"}\n' for _ in range(n)))
    stores = ["memory", "local"]
    server = None
    if shutil.which("redis-server"):
        server = subprocess.Popen(["redis-server", "--port", "16390", "--save", "", "--appendonly", "no"],
                                  stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        stores.append("redis://127.0.0.1:16390")
    print(f"\n## {n} zero-latency scripted calls through a tool lane of 8, per lane store (median of {reps})")
    try:
        for store in stores:
            wall, rss = median_of(reps, [FLUX, "--manifest", manifest, "run", batch, "--format", "jsonl", "-q",
                                        "--progress", "never", "--lane-store", store])
            print(f"  {store:<26} {n / wall:>10,.0f} calls/s  {wall * 1e6 / n:>8.1f} µs per call  "
                  f"peak RSS {rss:.0f} MB")
    finally:
        if server:
            server.kill()


def stream_memory(work, reps):
    n = 1_000_000
    manifest = os.path.join(work, "scripted.toml")
    write(manifest, '[tools.z]\nkind = "scripted"\neffect = "read"\n')
    batch = os.path.join(work, "million.jsonl")
    write(batch, "".join('{"tool":"z"}\n' for _ in range(n)))
    cmd = ["sh", "-c", f"cat {batch} | {FLUX} --manifest {manifest} run --stream -q --lane-store memory > /dev/null"]
    wall, rss = median_of(max(1, reps // 2), cmd)
    print(f"\n## {n:,} zero-latency scripted calls streamed through stdin (--stream)")
    print(f"  {wall:.2f} s ({n / wall:,.0f} calls/s), peak RSS {rss:.0f} MB (target: < 100 MB)")


def history_report(work, reps):
    """`report --history` over 100,000 run records (a month of a busy agent), four lanes each."""
    import json
    n = 100_000
    path = os.path.join(work, "history.jsonl")
    with open(path, "w") as f:
        for i in range(n):
            day, rest = divmod(i * 26, 86_400)  # 100,000 runs over 30 days
            hh, rest = divmod(rest, 3600)
            mm, ss = divmod(rest, 60)
            width = 3 + i % 4 if day < 20 else 7 + i % 5
            lanes = [{"lane": f"tool:t{k}", "limit": 4, "peak": 1 + (i + k) % 4,
                      "held_elsewhere": i % 3, "rejections": i % 2} for k in range(3)]
            lanes.append({"lane": "turn", "limit": 8, "peak": width, "held_elsewhere": None,
                          "rejections": 0})
            f.write(json.dumps({
                "time": f"2026-10-{day + 1:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z", "run_id": f"run-{i:x}",
                "tenant": "acme", "manifest": "0123456789abcdef", "input_format": "openai",
                "outcome": "completed", "calls": width, "width": width, "peak_in_flight": width,
                "wall_ms": 900, "tool_time_ms": 900 * width // 2, "critical_path_ms": 800,
                "retries": 0, "http_429": int(i % 7 == 0), "cache_hits": 0, "cost": 0.004,
                "cost_by_tool": {"search": 0.004}, "lanes": lanes,
                "model": {"name": "gpt-4o", "input_tokens": 1500, "output_tokens": 120, "cost": 0.00495},
            }) + "\n")
    wall, rss = median_of(reps, [FLUX, "report", "--history", path])
    size = os.path.getsize(path) / 1e6
    print(f"\n## report --history over {n:,} runs ({size:.0f} MB, median of {reps})")
    print(f"  {wall * 1000:.0f} ms, peak RSS {rss:.0f} MB (target: < 1 s)")


def turns(work, reps):
    """`run --turns` against one process per turn: MCP start-up, per-turn overhead, HTTP pool."""
    import json
    z = os.path.join(work, "turns-scripted.toml")
    write(z, '[tools.z]\nkind = "scripted"\neffect = "read"\n')
    n = 1000
    path = os.path.join(work, "turns-scripted.jsonl")
    write(path, '[{"tool":"z"},{"tool":"z"},{"tool":"z"}]\n' * n)
    walls = []
    for _ in range(reps):
        with open(path) as f:
            walls.append(timed([FLUX, "--manifest", z, "run", "--turns", "-q", "--lane-store", "memory"], stdin=f)[0])
    wall = statistics.median(walls)
    print(f"\n## run --turns: {n:,} turns of 3 zero-latency scripted calls (median of {reps})")
    print(f"  {wall * 1000:.0f} ms in all, {wall / n * 1e6:.0f} µs a turn (target: < 1 ms of overhead a turn)")

    servers = [("the project's MCP test server (Rust)", [os.path.join(ROOT, "target", "release", "examples", "mcp_test_server")])]
    everything = os.path.join(ROOT, "target", "mcp", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
    if os.path.exists(everything) and shutil.which("node"):
        servers.append(("server-everything (Node)", ["node", everything]))
    for label, command in servers:
        manifest = os.path.join(work, "turns-mcp.toml")
        tool = "sleep" if "Rust" in label else "echo"
        args = {"ms": 0, "tag": "x"} if tool == "sleep" else {"message": "x"}
        write(manifest, f'[mcp_servers.s]\ncommand = {json.dumps(command)}\n\n[tools.t]\nkind = "mcp"\nserver = "s"\ntool = "{tool}"\n')
        turn = json.dumps([{"tool": "t", "args": args}, {"tool": "t", "args": args}]) + "\n"
        path = os.path.join(work, "turns-mcp.jsonl")
        write(path, turn * 20)
        with open(path) as f:
            together, _ = timed([FLUX, "--manifest", manifest, "run", "--turns", "-q", "--lane-store", "memory"], stdin=f)
        one = os.path.join(work, "one-turn.json")
        write(one, turn)
        separate = [timed([FLUX, "--manifest", manifest, "run", one, "-q", "--lane-store", "memory"])[0] for _ in range(20)]
        first = statistics.median(separate)
        print(f"\n## 20 turns of 2 MCP calls, {label}")
        print(f"  --turns: {together * 1000:.0f} ms in all; 20 separate runs: {sum(separate) * 1000:.0f} ms "
              f"(one run, start-up included: {first * 1000:.0f} ms; target: --turns under {first * 1000 + 200:.0f} ms)")

    port = 18767
    count = os.path.join(work, "connections")
    server = subprocess.Popen([os.path.join(ROOT, "target", "release", "examples", "http_server"), str(port), count],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        manifest = os.path.join(work, "turns-http.toml")
        write(manifest, f'[tools.get]\nkind = "http"\neffect = "read"\nurl = "http://127.0.0.1:{port}/x"\n')
        path = os.path.join(work, "turns-http.jsonl")
        write(path, (json.dumps([{"tool": "get"}] * 10) + "\n") * 20)
        with open(path) as f:
            wall, _ = timed([FLUX, "--manifest", manifest, "run", "--turns", "-q", "--lane-store", "memory"], stdin=f)
        with open(count) as f:
            opened = int(f.read())
        print(f"\n## 20 turns of 10 HTTP GETs to a loopback server through --turns")
        print(f"  {wall * 1000:.0f} ms in all, {opened} connections opened for 200 requests (one pool for every turn)")
    finally:
        server.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--only", default="command,oneshot,sleep,scripted,plan,http,lanes,stream,history,turns,overhead",
                    help="comma-separated sections")
    ap.add_argument("--baseline", default=BASELINE,
                    help=f"a commit whose binary runs beside this one in the command and scripted sections "
                         f"(built from git in target/bench-baseline/; default {BASELINE}; '' for none)")
    args = ap.parse_args()
    reps = 3 if args.quick else 5
    build()
    baseline = build_baseline(args.baseline) if args.baseline else None
    BASELINE_NAME[0] = args.baseline
    with tempfile.TemporaryDirectory() as work:
        print(f"flux-tools benchmarks on {os.cpu_count()} cores")
        only = set(args.only.split(","))
        if "command" in only:
            command_throughput(work, args.calls, reps, baseline)
        if "oneshot" in only:
            one_shot(work, reps, baseline)
        if "sleep" in only:
            sleep_makespan(work, reps)
        if "scripted" in only or "plan" in only:
            scripted_throughput(work, reps, baseline)
        if "plan" in only:
            plan_time(work, reps, baseline)
        if "http" in only:
            http_throughput(work, reps)
        if "lanes" in only:
            lane_stores(work, reps)
        if "stream" in only:
            stream_memory(work, reps)
        if "history" in only:
            history_report(work, reps)
        if "turns" in only:
            turns(work, reps)
        if "overhead" in only:
            call_overhead(reps)


if __name__ == "__main__":
    sys.exit(main())
