"""The manifest's tools for the OpenAI Agents SDK: `FunctionTool`s that flux-tools runs (lanes,
schemas, retries, classified failures), so an `Agent(tools=function_tools())` needs no glue.

    from agents import Agent, Runner
    from flux_tools.adapters.openai_agents import function_tools, run_hooks
    tools = function_tools()
    agent = Agent(name="support", tools=tools)
    Runner.run_sync(agent, "…", hooks=run_hooks(tools))   # hooks: optional, see below

Every tool built here answers through one `flux-tools run --turns` process for the agent's life
(MCP servers start once), and the calls of one model response — which the SDK runs side by side
— go to it as one turn, so a `kv_put` then `kv_get` in one response are ordered on their
backend, and the turn lane, phases, caps and the read cache apply between them. The calls of a
response are gathered as they arrive; `run_hooks(tools)` also tells the batch which calls the
response holds (from the SDK's `on_llm_end`), so the turn goes out the moment the last one
arrives, in the model's order.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional

from .. import tools as definitions
from ._calls import Batcher, shared


def function_tools(
    *,
    names: Optional[Iterable[str]] = None,
    manifest: Optional[str] = None,
    batcher: Optional[Batcher] = None,
) -> List[Any]:
    """One `agents.FunctionTool` per tool of the manifest (or of `names`), all answered by
    `batcher` (default: the one process for this manifest)."""
    from agents import FunctionTool

    batch = batcher or shared(manifest)
    out = []
    for d in definitions("openai", names=list(names) if names else None, manifest=manifest):
        f = d["function"]

        async def invoke(ctx: Any, arguments: str, _name: str = f["name"]) -> str:
            cid = getattr(ctx, "tool_call_id", None) or f"call_{_name}"
            return (await batch.call(cid, _name, arguments)).content

        tool = FunctionTool(
            name=f["name"],
            description=f.get("description") or "",
            params_json_schema=f["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )
        tool.flux_tools_batcher = batch  # type: ignore[attr-defined]
        out.append(tool)
    return out


def run_hooks(tools: List[Any]) -> Any:
    """`RunHooks` that tell the tools' batcher which of its calls each model response holds."""
    from agents import RunHooks

    ours = {t.name for t in tools if hasattr(t, "flux_tools_batcher")}
    batchers = {id(t.flux_tools_batcher): t.flux_tools_batcher for t in tools if t.name in ours}

    class FluxToolsHooks(RunHooks):
        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            ids = [
                item.call_id
                for item in getattr(response, "output", [])
                if getattr(item, "type", None) == "function_call" and getattr(item, "name", None) in ours
            ]
            for b in batchers.values():
                b.expect(ids)

    return FluxToolsHooks()
