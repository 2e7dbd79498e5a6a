"""`flux-tools mcp serve` as the MCP server of the agents people run: the OpenAI Agents SDK's
`MCPServerStdio` and pydantic-ai's `MCPToolset` (on a FastMCP stdio client), each driving the served tools from a
scripted fake model on loopback (offline). Skipped, with the reason shown, when a framework
(or its MCP client) is not installed."""

import asyncio

import pytest

import flux_tools
from test_adapters import Scripted, manifest, serve  # noqa: F401 (a fixture)


@pytest.fixture()
def model_url():
    yield from serve(Scripted)


def test_serve_command_and_params_launch_the_gateway(manifest):
    command, args = flux_tools.serve_command(manifest, tools=["add"], tenant="acme")
    assert command == flux_tools.binary()
    assert args == ["--manifest", manifest, "mcp", "serve", "--tools", "add", "--tenant", "acme"]
    assert flux_tools.mcp_server_params(manifest) == {
        "command": command, "args": ["--manifest", manifest, "mcp", "serve"]}


def test_a_lane_store_password_is_never_put_on_the_command_line(manifest):
    import os
    import subprocess

    url = "redis://u:s3cret@127.0.0.1:1"
    with pytest.raises(flux_tools.FluxToolsError) as e:
        flux_tools.serve_command(manifest, lane_store=url)
    assert "s3cret" not in str(e.value) and "mcp_server_params" in str(e.value)
    params = flux_tools.mcp_server_params(manifest, lane_store=url)
    assert not any("s3cret" in a for a in params["args"]), params
    assert params["env"] == {"FLUX_TOOLS_LANE_STORE": url}
    # The gateway takes it from there (a Redis that is not there: it says so, without the
    # password).
    done = subprocess.run(
        [params["command"], *params["args"]],
        env={**os.environ, **params["env"]},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "127.0.0.1:1" in done.stderr and "s3cret" not in done.stderr, done.stderr


def test_openai_agents_sdk_calls_the_gateways_tools(model_url, manifest):
    agents = pytest.importorskip("agents")
    openai = pytest.importorskip("openai")
    mcp = pytest.importorskip("agents.mcp")

    agents.set_tracing_disabled(True)

    async def go():
        async with mcp.MCPServerStdio(params=flux_tools.mcp_server_params(manifest)) as server:
            listed = [t.name for t in await server.list_tools()]
            model = agents.OpenAIChatCompletionsModel(
                model="fake", openai_client=openai.AsyncOpenAI(base_url=model_url, api_key="offline"))
            agent = agents.Agent(name="t", instructions="use tools", model=model, mcp_servers=[server])
            return listed, await agents.Runner.run(agent, "weather and a sum")

    listed, result = asyncio.run(go())
    assert listed == ["weather_lookup", "add"]
    assert '"forecast":"sunny"' in result.final_output, result.final_output
    assert '"sum":"2+3"' in result.final_output, result.final_output


def test_pydantic_ai_calls_the_gateways_tools(model_url, manifest):
    pytest.importorskip("pydantic_ai")
    pytest.importorskip("fastmcp")  # pydantic-ai-slim[mcp]
    from fastmcp.client import Client
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    command, args = flux_tools.serve_command(manifest)
    model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=model_url, api_key="offline"))
    agent = Agent(model, toolsets=[MCPToolset(Client(StdioTransport(command=command, args=args)))])
    result = agent.run_sync("weather and a sum")
    assert '"forecast":"sunny"' in result.output, result.output
    assert '"sum":"2+3"' in result.output, result.output
