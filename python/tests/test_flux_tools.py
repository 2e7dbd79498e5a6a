"""The installed package, offline: the binary is on the environment's PATH, tool definitions
come from the manifest, and a 3-turn conversation with the `openai` client against a scripted
fake model (a local HTTP server) answers every tool call through one `Session`."""

import http.server
import json
import os
import shutil
import subprocess
import sysconfig
import threading

import pytest

import flux_tools

MANIFEST = """
[concurrency]
max_concurrent_tools = 4

[tools."weather.lookup"]
kind = "scripted"
effect = "read"
description = "The weather in a city"
latency = "50ms"
output = { city = "{city}", forecast = "sunny" }
[tools."weather.lookup".args]
city = { type = "string", required = true, max_length = 50 }

[tools.add]
kind = "scripted"
effect = "read"
description = "Adds two integers"
output = { sum = "{a}+{b}" }
[tools.add.args]
a = { type = "integer", required = true, min = 0 }
b = { type = "integer", required = true, min = 0 }
"""


@pytest.fixture()
def manifest(tmp_path):
    path = tmp_path / "tools.toml"
    path.write_text(MANIFEST)
    return str(path)


def test_the_binary_is_installed_on_the_environments_path():
    # Where pip puts an environment's commands (its `bin/`, on PATH once it is activated).
    scripts = sysconfig.get_path("scripts")
    exe = flux_tools.binary()
    assert exe == os.path.join(scripts, "flux-tools"), (exe, scripts)
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("flux-tools ")
    activated = dict(os.environ, PATH=scripts + os.pathsep + os.environ.get("PATH", ""))
    assert shutil.which("flux-tools", path=activated["PATH"]) == exe


def test_tools_are_offered_under_names_every_provider_accepts(manifest):
    defs = flux_tools.tools("openai", manifest=manifest)
    names = [d["function"]["name"] for d in defs]
    assert names == ["weather_lookup", "add"]
    add = defs[1]["function"]["parameters"]
    assert add["properties"]["a"] == {"type": "integer", "minimum": 0}
    assert add["required"] == ["a", "b"]
    anthropic = flux_tools.tools("anthropic", manifest=manifest, names=["add"])
    assert [t["name"] for t in anthropic] == ["add"]
    with pytest.raises(flux_tools.FluxToolsError):
        flux_tools.tools("openai", manifest=manifest, names=["nope"])


def chat_completion(turn, calls):
    return {
        "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}
                           for cid, name, args in calls]}}],
    }


class FakeModel(http.server.BaseHTTPRequestHandler):
    """A scripted model: turn N asks for N+1 calls; it checks that the previous answers came."""

    turn = 0
    seen = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeModel.seen.append(body)
        FakeModel.turn += 1
        t = FakeModel.turn
        calls = [(f"call_{t}_{i}", "weather_lookup" if i % 2 == 0 else "add",
                  {"city": f"city-{t}-{i}"} if i % 2 == 0 else {"a": t, "b": i})
                 for i in range(t + 1)]
        data = json.dumps(chat_completion(t, calls)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_a_three_turn_conversation_answers_every_call_in_order(manifest):
    openai = pytest.importorskip("openai")
    server = http.server.HTTPServer(("127.0.0.1", 0), FakeModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="offline")
    tools = flux_tools.tools("openai", manifest=manifest)
    messages = [{"role": "user", "content": "Plan my trip."}]
    try:
        with flux_tools.Session(emit="openai", manifest=manifest) as session:
            for turn in range(1, 4):
                reply = client.chat.completions.create(model="fake", messages=messages, tools=tools)
                asked = [c.id for c in reply.choices[0].message.tool_calls]
                messages.append(reply.choices[0].message.model_dump(exclude_none=True))
                answer = session.turn(reply.model_dump())
                assert [m["tool_call_id"] for m in answer] == asked
                assert all(not m["content"].startswith("ERROR") for m in answer), answer
                messages.extend(answer)
            assert session.turns == 3
        assert session.close() == 0
    finally:
        server.shutdown()
    # The model saw the tool definitions and, from turn 2, every earlier answer.
    assert FakeModel.seen[0]["tools"][0]["function"]["name"] == "weather_lookup"
    tool_messages = [m for m in FakeModel.seen[2]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 2 + 3
    assert json.loads(tool_messages[0]["content"]) == {"city": "city-1-0", "forecast": "sunny"}


def test_run_answers_and_raises_only_for_invalid_input(manifest):
    reply = chat_completion(1, [("c1", "add", {"a": 1, "b": 2}), ("c2", "add", {"a": -1, "b": 2})])
    answer = flux_tools.run(reply, emit="openai", manifest=manifest)
    assert answer[0]["content"] == '{"sum":"1+2"}'
    assert answer[1]["content"].startswith("ERROR")  # a bad call costs only itself (exit 1)
    doc = flux_tools.run(reply, manifest=manifest)
    assert doc["outcome"] == "completed" and len(doc["results"]) == 2
    with pytest.raises(flux_tools.FluxToolsError) as e:
        flux_tools.run("calls: [{ tool: nope }]", manifest=manifest)
    assert e.value.status == 2 and "unknown tool" in str(e.value)
    import asyncio
    answer = asyncio.run(flux_tools.arun(reply, emit="anthropic", manifest=manifest))
    assert answer["role"] == "user" and len(answer["content"]) == 2


def test_a_bad_turn_raises_and_the_session_goes_on(manifest):
    with flux_tools.Session(manifest=manifest) as session:
        with pytest.raises(flux_tools.FluxToolsError) as e:
            session.turn("{not json")
        assert e.value.status == 2
        doc = session.turn([{"tool": "add", "args": {"a": 2, "b": 2}}])
        assert doc["results"][0]["output"] == {"sum": "2+2"}
    assert session.close() == 2


def test_run_raises_with_the_diagnostics_parsed(manifest):
    with pytest.raises(flux_tools.FluxToolsError) as e:
        flux_tools.run("calls: [{ tool: nope }]", manifest=manifest)
    first = e.value.diagnostics[0]
    assert first["severity"] == "error" and "unknown tool" in first["message"], e.value.diagnostics
    assert (first["file"], first["line"], first["column"]) == ("<stdin>", 1, 17), first


def test_a_session_on_a_bad_manifest_raises_from_its_constructor(tmp_path):
    bad = tmp_path / "tools.toml"
    bad.write_text("[tools.x]\nkind = \"scripted\"\neffect = \"sideways\"\n")
    with pytest.raises(flux_tools.FluxToolsError) as e:
        flux_tools.Session(manifest=str(bad))
    assert e.value.status == 2, e.value
    first = e.value.diagnostics[0]
    assert first["file"].endswith("tools.toml") and first["line"] == 3, e.value.diagnostics
    assert "sideways" in str(e.value)


def test_a_session_whose_process_died_raises_its_status_from_the_next_turn(manifest):
    import signal

    with flux_tools.Session(manifest=manifest) as session:
        assert session.turn([{"tool": "add", "args": {"a": 1, "b": 1}}])["outcome"] == "completed"
        os.kill(session.pid, signal.SIGKILL)
        with pytest.raises(flux_tools.FluxToolsError) as e:
            session.turn([{"tool": "add", "args": {"a": 1, "b": 1}}])
        assert e.value.status == -signal.SIGKILL, e.value
    # Leaving the block raised nothing more.


def test_a_named_run_sends_the_same_keys_wherever_it_runs_again(tmp_path):
    manifest = tmp_path / "tools.toml"
    manifest.write_text(MANIFEST + """
[tools.note]
kind = "scripted"
effect = "write"
description = "Keeps a note"
output = { kept = "{text}" }
[tools.note.args]
text = { type = "string", required = true }
""")
    reply = chat_completion(1, [("c1", "note", {"text": "hello"})])
    first = flux_tools.run(reply, manifest=str(manifest), run_id="wf-9:step-1")
    again = flux_tools.run(reply, manifest=str(manifest), run_id="wf-9:step-1")
    key = first["results"][0]["idempotency_key"]
    assert first["run_id"] == "wf-9:step-1" and key.startswith("wf-9:step-1:c1:")
    assert again["results"][0]["idempotency_key"] == key
    # A named session: turn N is run `RUN_ID-N`.
    with flux_tools.Session(manifest=str(manifest), run_id="wf-9") as session:
        runs = [session.turn(reply)["run_id"] for _ in range(2)]
    assert runs == ["wf-9-1", "wf-9-2"]


# The tool of `tests/cli/owners.rs`: a write in a lane of 1 that logs `overlap` when an earlier
# call's process still runs as it starts.
OWNED = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                          "fixtures", "lane_of_one.toml")).read()


def test_a_killed_session_takes_its_tool_with_it_and_the_lane_waits_for_that(tmp_path):
    import signal
    import time

    manifest = tmp_path / "tools.toml"
    manifest.write_text(OWNED)
    log = tmp_path / "log"
    call = lambda name: [{"tool": "slow", "args": {"dir": str(tmp_path), "name": name}}]
    session = flux_tools.Session(manifest=str(manifest))
    died = []
    turn = threading.Thread(target=lambda: died.append(_raises(session.turn, call("a"))))
    turn.start()
    deadline = time.monotonic() + 15
    while "start a" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int((tmp_path / "pid-a").read_text())
    os.kill(session.pid, signal.SIGKILL)
    turn.join(10)
    assert died == [True]
    second = flux_tools.run(json.dumps(call("b")), manifest=str(manifest))
    assert second["results"][0]["status"] == "ok", second
    time.sleep(0.5)
    text = log.read_text()
    assert "overlap" not in text and "end a" not in text, text
    # Nothing of the killed session's tool is left (a zombie awaiting its reaper aside).
    try:
        state = open(f"/proc/{pid}/status").read().split("State:")[1].split()[0]
    except (FileNotFoundError, IndexError):
        state = None
    assert state in (None, "Z"), state
    session.close()


def _raises(f, *args):
    try:
        f(*args)
    except flux_tools.FluxToolsError:
        return True
    return False
