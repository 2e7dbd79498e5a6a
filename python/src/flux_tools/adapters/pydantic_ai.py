"""The manifest's tools for pydantic-ai, as deferred tools flux-tools executes: the agent stops
with `DeferredToolRequests`, `execute` runs every requested call in one flux-tools run (side by
side, inside the lanes) and returns the `DeferredToolResults` to continue with.

    agent = Agent(model, toolsets=[toolset()], output_type=[str, DeferredToolRequests])
    result = agent.run_sync(prompt)
    while isinstance(result.output, DeferredToolRequests):
        result = agent.run_sync(message_history=result.all_messages(),
                                deferred_tool_results=asyncio.run(execute(result.output)))
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from .. import tools as definitions
from ._calls import answer


def toolset(*, names: Optional[Iterable[str]] = None, manifest: Optional[str] = None) -> Any:
    """An `ExternalToolset` of the manifest's tools (or of `names`)."""
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import ExternalToolset

    defs = definitions("openai", names=list(names) if names else None, manifest=manifest)
    return ExternalToolset(
        [
            ToolDefinition(
                name=d["function"]["name"],
                description=d["function"].get("description"),
                parameters_json_schema=d["function"]["parameters"],
            )
            for d in defs
        ]
    )


async def execute(requests: Any, *, manifest: Optional[str] = None) -> Any:
    """Run every call of `requests` (`DeferredToolRequests`) in one flux-tools run."""
    from pydantic_ai.tools import DeferredToolResults

    calls = [(c.tool_call_id, c.tool_name, c.args_as_json_str()) for c in requests.calls]
    return DeferredToolResults(calls=await answer(calls, manifest))
