"""Tool calls answered by flux-tools, as an OpenAI assistant message: the calls go in as the
model asked for them (arguments as data), the tool messages come back in call order."""

from __future__ import annotations

from typing import Any, Iterable, Optional, Tuple

from .. import arun


async def answer(calls: Iterable[Tuple[str, str, str]], manifest: Optional[str] = None) -> Any:
    """Run `(call id, tool name, arguments JSON)` calls; returns `{call id: content}`."""
    tool_calls = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args or "{}"}}
        for cid, name, args in calls
    ]
    reply = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    messages = await arun(reply, emit="openai", manifest=manifest)
    return {m["tool_call_id"]: m["content"] for m in messages}
