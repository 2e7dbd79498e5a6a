"""One flux-tools process for an agent's life, and the calls of one model response run as one
turn of it — so write chains, read/write hazards, the turn lane, phases, caps and the read cache
apply between the calls a model made together, and MCP servers start once.

`Batcher.call` is what a framework's tool function awaits. The calls of one response arrive
together (an SDK runs parallel tool calls as tasks started side by side): the first to arrive
waits until no new call has come for a few turns of the event loop — or, when the framework's
hook said which calls the response holds (`expect`), until those have all arrived — then all of
them go to the process as one assistant message, in the model's order, and each gets its own
answer. The process is driven from a worker thread, so it outlives any one event loop
(`Runner.run_sync` makes a new one per run).
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import FluxToolsError, Session

#: Event-loop turns with no new call after which a batch is complete.
QUIET_TURNS = 32

#: How a failure reads in an answer: `ERROR (status, kind): message`.
_FAILURE = re.compile(r"^ERROR \((?P<status>[a-z_]+), (?P<kind>[a-z_]+)\): (?P<message>.*)$", re.S)

#: Kinds a model fixes by calling again with other arguments (or another tool).
RETRYABLE = ("invalid_call", "unknown_tool", "guardrail")


@dataclass
class Answer:
    """One call's answer: the text the model reads, and for a failure its kind."""

    content: str
    error: bool = False
    kind: Optional[str] = None
    message: Optional[str] = None

    @property
    def retryable(self) -> bool:
        return self.error and self.kind in RETRYABLE


class Batcher:
    """One `flux-tools run --turns` process; concurrent `call`s of one response share a turn."""

    def __init__(self, manifest: Optional[str] = None, args: Sequence[str] = ()):
        self._manifest = manifest
        self._args = list(args)
        self._session: Optional[Session] = None
        self._lock = threading.Lock()
        self._pending: List[Tuple[str, str, str, "asyncio.Future[Answer]"]] = []
        self._flusher: Optional["asyncio.Task[None]"] = None
        self._expected: List[str] = []
        #: Turns run so far (one per model response).
        self.turns = 0

    def expect(self, call_ids: Sequence[str]) -> None:
        """The calls the model's latest response holds, in its order (a framework hook's word)."""
        self._expected = list(call_ids)

    async def call(self, call_id: str, name: str, arguments: str) -> Answer:
        """Run one call of the current response; returns when its turn is answered."""
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[Answer]" = loop.create_future()
        self._pending.append((call_id, name, arguments or "{}", future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush_when_complete())
        return await future

    async def answer(self, calls: Sequence[Tuple[str, str, str]]) -> Dict[str, Answer]:
        """Run `(call id, tool name, arguments JSON)` calls as one turn."""
        answers = await asyncio.gather(*(self.call(*c) for c in calls))
        return {c[0]: a for c, a in zip(calls, answers)}

    async def _flush_when_complete(self) -> None:
        quiet, seen = 0, -1
        while quiet < QUIET_TURNS:
            ids = {c[0] for c in self._pending}
            if self._expected and all(i in ids for i in self._expected):
                break
            quiet = quiet + 1 if len(self._pending) == seen else 0
            seen = len(self._pending)
            await asyncio.sleep(0)
        batch, self._pending, self._flusher = self._pending, [], None
        order = {cid: i for i, cid in enumerate(self._expected)}
        batch.sort(key=lambda c: order.get(c[0], len(order)))
        self._expected = []
        try:
            answers = await asyncio.to_thread(self._turn, [c[:3] for c in batch])
        except BaseException as e:  # the process failed: every call of the turn hears why
            for *_, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        for cid, _, _, future in batch:
            if not future.done():
                future.set_result(answers.get(cid) or Answer("ERROR (never_dispatched, run_ended): no answer", True))

    def _turn(self, calls: List[Tuple[str, str, str]]) -> Dict[str, Answer]:
        reply = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls
            ],
        }
        with self._lock:
            if self._session is None:
                self._session = Session(emit="anthropic", manifest=self._manifest, args=self._args)
            message = self._session.turn(reply)
            self.turns += 1
        return {block["tool_use_id"]: _answer_of(block) for block in (message or {}).get("content", [])}

    @property
    def pid(self) -> Optional[int]:
        """The flux-tools process's id (once started)."""
        return self._session.pid if self._session else None

    def close(self) -> Optional[int]:
        """End the process; returns its exit status."""
        with self._lock:
            session, self._session = self._session, None
        return session.close() if session else None


def _answer_of(block: Dict[str, Any]) -> Answer:
    content = block.get("content")
    text = content if isinstance(content, str) else "".join(
        b.get("text", "") for b in content or [] if isinstance(b, dict)
    )
    if not block.get("is_error"):
        return Answer(text)
    m = _FAILURE.match(text)
    return Answer(text, True, m.group("kind") if m else None, m.group("message") if m else text)


_shared: Dict[Tuple[Optional[str], Tuple[str, ...]], Batcher] = {}
_shared_lock = threading.Lock()


def shared(manifest: Optional[str] = None, args: Sequence[str] = ()) -> Batcher:
    """The process-wide batcher for a manifest (so tools built separately share one process)."""
    key = (manifest, tuple(args))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Batcher(manifest, args)
        return _shared[key]


async def answer(calls: Sequence[Tuple[str, str, str]], manifest: Optional[str] = None) -> Dict[str, str]:
    """Run `(call id, tool name, arguments JSON)` calls as one turn; returns `{call id: content}`."""
    answers = await shared(manifest).answer(calls)
    return {cid: a.content for cid, a in answers.items()}


__all__ = ["Answer", "Batcher", "FluxToolsError", "answer", "shared"]
