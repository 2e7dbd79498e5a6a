"""The manifest's tools for pydantic-ai, as deferred tools flux-tools executes: the agent stops
with `DeferredToolRequests`, `execute` runs every requested call as one turn of one
`flux-tools run --turns` process (kept for the agent's life: MCP servers start once) and returns
the `DeferredToolResults` to continue with.

    agent = Agent(model, toolsets=[toolset()], output_type=[str, DeferredToolRequests])
    result = agent.run_sync(prompt)
    while isinstance(result.output, DeferredToolRequests):
        result = agent.run_sync(message_history=result.all_messages(),
                                deferred_tool_results=asyncio.run(execute(result.output)))

Failures reach the model as pydantic-ai expects: a call the model can fix by calling again with
other arguments or another tool (kind `invalid_call`, `unknown_tool` or `guardrail`) is a `ModelRetry`, which counts against the
tool's retries; any other failure is a `ToolFailed` carrying flux-tools' classified message.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from .. import tools as definitions
from ._calls import Batcher, shared


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


async def execute(requests: Any, *, manifest: Optional[str] = None, batcher: Optional[Batcher] = None) -> Any:
    """Run every call of `requests` (`DeferredToolRequests`) as one turn."""
    from pydantic_ai.exceptions import ModelRetry, ToolFailed
    from pydantic_ai.tools import DeferredToolResults

    calls = [(c.tool_call_id, c.tool_name, c.args_as_json_str()) for c in requests.calls]
    answers = await (batcher or shared(manifest)).answer(calls)
    results: dict = {}
    for cid, a in answers.items():
        if a.retryable:
            results[cid] = ModelRetry(a.message or a.content)
        elif a.error:
            results[cid] = ToolFailed(a.content)
        else:
            results[cid] = a.content
    return DeferredToolResults(calls=results)
