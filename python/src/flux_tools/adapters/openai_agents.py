"""The manifest's tools for the OpenAI Agents SDK: `FunctionTool`s that flux-tools runs (lanes,
schemas, retries, classified failures), so an `Agent(tools=function_tools())` needs no glue.

    from agents import Agent
    from flux_tools.adapters.openai_agents import function_tools
    agent = Agent(name="support", tools=function_tools())
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional

from .. import tools as definitions
from ._calls import answer


def function_tools(*, names: Optional[Iterable[str]] = None, manifest: Optional[str] = None) -> List[Any]:
    """One `agents.FunctionTool` per tool of the manifest (or of `names`)."""
    from agents import FunctionTool

    out = []
    for d in definitions("openai", names=list(names) if names else None, manifest=manifest):
        f = d["function"]

        async def invoke(ctx: Any, arguments: str, _name: str = f["name"]) -> str:
            cid = getattr(ctx, "tool_call_id", None) or "call_1"
            return (await answer([(cid, _name, arguments)], manifest))[cid]

        out.append(
            FunctionTool(
                name=f["name"],
                description=f.get("description") or "",
                params_json_schema=f["parameters"],
                on_invoke_tool=invoke,
                strict_json_schema=False,
            )
        )
    return out
