"""The framework adapters against a scripted fake model on loopback (offline): the OpenAI Agents
SDK runs the manifest's tools through `function_tools()`, pydantic-ai through `toolset()` and
`execute()`. Each is skipped, with its reason shown, when the framework is not installed."""

import asyncio
import http.server
import json
import threading

import pytest

from test_flux_tools import MANIFEST


def respond(handler, message, final):
    """Answer a chat-completions request with `message`."""
    data = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                       "choices": [{"index": 0, "message": message,
                                    "finish_reason": "stop" if final else "tool_calls"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def tool_call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


class FakeModel(http.server.BaseHTTPRequestHandler):
    """First request: the tool calls `calls`; next: a final answer quoting the tool results."""

    requests = []
    calls = []

    @staticmethod
    def quote(results):
        return " | ".join(str(m["content"]) for m in results)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            message = {"role": "assistant", "content": None, "tool_calls": type(self).calls}
        else:
            message = {"role": "assistant", "content": type(self).quote(results)}
        respond(self, message, final=bool(results))

    def log_message(self, *args):
        pass


class Scripted(FakeModel):
    """Two tool calls; then the results quoted."""

    requests = []
    calls = [tool_call("call_w", "weather_lookup", {"city": "Oslo"}),
             tool_call("call_a", "add", {"a": 2, "b": 3})]


def serve(handler):
    """Serve `handler` on loopback; yields its base URL."""
    handler.requests = []
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


@pytest.fixture()
def model_url():
    yield from serve(Scripted)


@pytest.fixture()
def manifest(tmp_path):
    path = tmp_path / "tools.toml"
    path.write_text(MANIFEST)
    return str(path)


def test_openai_agents_sdk_runs_the_manifests_tools(model_url, manifest):
    agents = pytest.importorskip("agents")
    openai = pytest.importorskip("openai")
    from flux_tools.adapters.openai_agents import function_tools

    agents.set_tracing_disabled(True)
    model = agents.OpenAIChatCompletionsModel(
        model="fake", openai_client=openai.AsyncOpenAI(base_url=model_url, api_key="offline"))
    agent = agents.Agent(name="t", instructions="use tools", model=model,
                         tools=function_tools(manifest=manifest))
    result = asyncio.run(agents.Runner.run(agent, "weather and a sum"))
    assert '"forecast":"sunny"' in result.final_output
    assert '"sum":"2+3"' in result.final_output
    offered = [t["function"]["name"] for t in Scripted.requests[0]["tools"]]
    assert offered == ["weather_lookup", "add"]


def test_pydantic_ai_defers_its_calls_to_flux_tools(model_url, manifest):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.tools import DeferredToolRequests

    from flux_tools.adapters.pydantic_ai import execute, toolset

    model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=model_url, api_key="offline"))
    agent = Agent(model, toolsets=[toolset(manifest=manifest)], output_type=[str, DeferredToolRequests])
    result = agent.run_sync("weather and a sum")
    assert isinstance(result.output, DeferredToolRequests)
    assert [c.tool_name for c in result.output.calls] == ["weather_lookup", "add"]
    answers = asyncio.run(execute(result.output, manifest=manifest))
    result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=answers)
    assert '"forecast":"sunny"' in result.output and '"sum":"2+3"' in result.output


KV_MANIFEST = MANIFEST + """
[tools.kv_put]
kind = "scripted"
effect = "write"
description = "Set a key"
kv = "put"
backend = "kv"
latency = "100ms"
[tools.kv_put.args]
key = { type = "string", required = true }
value = { type = "string", required = true }

[tools.kv_get]
kind = "scripted"
effect = "read"
description = "Read a key"
kv = "get"
backend = "kv"
[tools.kv_get.args]
key = { type = "string", required = true }
"""


class WriteThenRead(FakeModel):
    """One response asking for a write and a read of the same key (and an invalid call); then
    the results quoted by call id."""

    requests = []
    calls = [tool_call("call_put", "kv_put", {"key": "k", "value": "new"}),
             tool_call("call_get", "kv_get", {"key": "k"}),
             tool_call("call_bad", "add", {"a": -1, "b": 3})]

    @staticmethod
    def quote(results):
        return " | ".join(f'{m["tool_call_id"]}={m["content"]}' for m in results)


@pytest.fixture()
def kv_model_url():
    yield from serve(WriteThenRead)


@pytest.fixture()
def kv_manifest(tmp_path):
    path = tmp_path / "tools.toml"
    path.write_text(KV_MANIFEST)
    return str(path)


@pytest.mark.parametrize("with_hooks", [False, True])
def test_openai_agents_sdk_runs_one_response_as_one_turn_of_one_process(kv_model_url, kv_manifest, with_hooks):
    agents = pytest.importorskip("agents")
    openai = pytest.importorskip("openai")
    from flux_tools.adapters._calls import Batcher
    from flux_tools.adapters.openai_agents import function_tools, run_hooks

    agents.set_tracing_disabled(True)
    batcher = Batcher(kv_manifest)
    tools = function_tools(manifest=kv_manifest, batcher=batcher)
    model = agents.OpenAIChatCompletionsModel(
        model="fake", openai_client=openai.AsyncOpenAI(base_url=kv_model_url, api_key="offline"))
    agent = agents.Agent(name="t", instructions="use tools", model=model, tools=tools)
    hooks = run_hooks(tools) if with_hooks else None
    pids = set()
    for _ in range(3):
        WriteThenRead.requests = []
        result = agents.Runner.run_sync(agent, "set k, then read it", hooks=hooks)
        pids.add(batcher.pid)
        # The read came after the write on its backend, in the same process: the new value.
        assert "call_get=new" in result.final_output, result.final_output
        assert "call_bad=ERROR (never_dispatched, invalid_call)" in result.final_output
    assert len(pids) == 1 and None not in pids
    assert batcher.turns == 3
    assert batcher.close() == 1  # some calls failed (the invalid one): the worst exit status


def test_pydantic_ai_keeps_one_process_and_asks_for_a_retry_of_an_invalid_call(kv_manifest):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.exceptions import ModelRetry, ToolFailed
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.tools import DeferredToolRequests

    from flux_tools.adapters._calls import Batcher
    from flux_tools.adapters.pydantic_ai import execute

    batcher = Batcher(kv_manifest)
    requests = DeferredToolRequests(calls=[
        ToolCallPart("kv_put", {"key": "k", "value": "v1"}, tool_call_id="p"),
        ToolCallPart("kv_get", {"key": "k"}, tool_call_id="g"),
        ToolCallPart("add", {"a": -1, "b": 3}, tool_call_id="bad"),
        ToolCallPart("no_such_tool", {}, tool_call_id="unknown"),
    ])
    first = asyncio.run(execute(requests, batcher=batcher))
    assert first.calls["g"] == "v1"
    assert isinstance(first.calls["bad"], ModelRetry)
    assert "below its minimum" in str(first.calls["bad"])
    assert isinstance(first.calls["unknown"], ModelRetry)
    pid = batcher.pid
    again = DeferredToolRequests(calls=[ToolCallPart("kv_get", {"key": "k"}, tool_call_id="g2")])
    second = asyncio.run(execute(again, batcher=batcher))
    assert second.calls["g2"] == "v1"  # the same process: the store kept its value
    assert batcher.pid == pid and batcher.turns == 2
    assert not any(isinstance(v, ToolFailed) for v in second.calls.values())
    batcher.close()
