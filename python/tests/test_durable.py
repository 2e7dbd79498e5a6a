"""The DBOS recipe (examples/dbos_agent.py), tried as production would: its worker SIGKILLed
(with its flux-tools and tools: the whole process group, as a machine dies) at random points
20 times, each time recovered by a new worker process — every write reaches its tool exactly
once, and the result is an uninterrupted run's."""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "dbos_agent.py")

# A write that dedupes by its idempotency key (as a payments API does), declared idempotent.
NOTE = """#!/bin/sh
exec 9>>"$0.lock"
flock 9
if grep -qxF "$FLUX_IDEMPOTENCY_KEY" "{log}"; then
  echo "$FLUX_IDEMPOTENCY_KEY" >> "{log}.dups"
else
  echo "$FLUX_IDEMPOTENCY_KEY" >> "{log}"
fi
flock -u 9
sleep 0.15
printf '{{"noted": "%s"}}' "$1"
"""

MANIFEST = """
[concurrency]
max_concurrent_tools = 4

[tools.note]
kind = "command"
command = ["/bin/sh", "{script}", "{{text}}"]
stdin = "none"
effect = "write"
idempotent = true
[tools.note.args]
text = {{ type = "string", required = true }}

[tools.lookup]
kind = "scripted"
effect = "read"
latency = "50ms"
output = {{ answer = "{{q}}" }}
[tools.lookup.args]
q = {{ type = "string", required = true }}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def redis_url(tmp_path):
    if not shutil.which("redis-server"):
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed")
        pytest.skip("NOTICE: redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL)
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.time() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def worker(env, workflow_id):
    return subprocess.Popen([sys.executable, EXAMPLE, workflow_id, "5"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_a_dbos_agent_killed_twenty_times_writes_each_intent_once(tmp_path, redis_url):
    pytest.importorskip("dbos")
    log = tmp_path / "notes.log"
    script = tmp_path / "note.sh"
    script.write_text(NOTE.format(log=log))
    manifest = tmp_path / "tools.toml"
    manifest.write_text(MANIFEST.format(script=script))
    env = dict(os.environ, FLUX_JOURNAL=redis_url, FLUX_MANIFEST=str(manifest),
               DBOS_SYSTEM_DATABASE_URL=f"sqlite:///{tmp_path / 'dbos.sqlite'}",
               FLUX_TOOLS_LEASE_MS="1000")
    rng = random.Random(50)
    started = time.time()
    kills = 0
    while kills < 20:
        w = worker(env, "wf-chaos")
        time.sleep(rng.uniform(0.3, 1.4))
        if w.poll() is not None:
            break  # it finished before its kill
        os.killpg(w.pid, signal.SIGKILL)
        w.wait()
        kills += 1
    w = worker(env, "wf-chaos")
    out, err = w.communicate(timeout=120)
    assert w.returncode == 0, err
    chaotic = json.loads(out.strip().splitlines()[-1])
    chaos_s = time.time() - started
    assert kills == 20, f"the workflow ended after {kills} kills"
    keys = log.read_text().split()
    dups = (tmp_path / "notes.log.dups").read_text().split() if (tmp_path / "notes.log.dups").exists() else []
    chaos_keys = [k for k in keys if k.startswith("wf-chaos:")]
    # Every write reached its tool exactly once: 5 turns of 3 notes, each key once.
    assert len(chaos_keys) == 15 and len(set(chaos_keys)) == 15, chaos_keys
    # An uninterrupted run of the same workflow answers the same.
    t = time.time()
    w = worker(env, "wf-calm")
    out, err = w.communicate(timeout=120)
    assert w.returncode == 0, err
    calm = json.loads(out.strip().splitlines()[-1])
    calm_s = time.time() - t
    assert chaotic == calm
    assert all(status == "ok" for turn in calm for _, status, _ in turn)
    print(f"\nchaos: {kills} SIGKILLs of the worker's process group; 15 writes, each reached its "
          f"tool once ({len(dups)} resent in flight with the same key and deduped by the tool); "
          f"{chaos_s:.1f} s with kills vs {calm_s:.1f} s uninterrupted; results equal")
