"""The framework adapters against a scripted fake model on loopback (offline): the OpenAI Agents
SDK runs the manifest's tools through `function_tools()`, pydantic-ai through `toolset()` and
`execute()`. Each is skipped, with its reason shown, when the framework is not installed."""

import asyncio
import http.server
import json
import threading

import pytest

from test_flux_tools import MANIFEST


class Scripted(http.server.BaseHTTPRequestHandler):
    """First request: two tool calls. Next: a final answer quoting the tool results it got."""

    requests = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Scripted.requests.append(body)
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_w", "type": "function",
                 "function": {"name": "weather_lookup", "arguments": json.dumps({"city": "Oslo"})}},
                {"id": "call_a", "type": "function",
                 "function": {"name": "add", "arguments": json.dumps({"a": 2, "b": 3})}}]}
        else:
            message = {"role": "assistant", "content": " | ".join(str(m["content"]) for m in results)}
        data = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                           "choices": [{"index": 0, "message": message,
                                        "finish_reason": "tool_calls" if not results else "stop"}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def model_url():
    Scripted.requests = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


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
