"""Drive the `flux-tools` binary from Python.

- `tools(provider)`: the manifest's tools as the provider's request takes them.
- `run(reply, emit=…)` / `await arun(reply, emit=…)`: run one model reply (or batch) and get the
  answer back. Exit statuses 0 (all ok), 1 (some calls failed) and 3 (ended early) are answers;
  2 (the input or the manifest is invalid) raises `FluxToolsError` with the diagnostics.
- `Session`: one `flux-tools run --turns` process for a whole conversation — MCP servers, HTTP
  connections and lanes are kept between turns, so a turn costs milliseconds.
- `serve_command(...)` / `mcp_server_params(...)`: how an MCP client launches `flux-tools mcp
  serve` over stdio — the command and arguments, or the dict the OpenAI Agents SDK's
  `MCPServerStdio(params=…)` takes (pydantic-ai: `MCPToolset(Client(StdioTransport(command,
  args)))`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from typing import Any, Iterable, Optional, Sequence, Union

__all__ = [
    "FluxToolsError",
    "diagnostics",
    "Session",
    "arun",
    "binary",
    "mcp_server_params",
    "run",
    "serve_command",
    "tools",
]

Reply = Union[str, bytes, dict, list]

#: Exit statuses that carry an answer (every call ok; some failed; the run ended early).
ANSWERS = (0, 1, 3)


class FluxToolsError(RuntimeError):
    """flux-tools refused the input (exit status 2) or could not run. `status` is its exit
    status; `diagnostics` a list of `{severity, message, file, line, column, hint}` (the
    diagnostics flux-tools printed; for a turn that could not be read, the turn's own)."""

    def __init__(self, message: str, status: Optional[int] = None, diagnostics: Any = None):
        super().__init__(message)
        self.status = status
        self.diagnostics = diagnostics


def binary() -> str:
    """The `flux-tools` this package installed (beside the interpreter), else the one on PATH."""
    exe = "flux-tools.exe" if os.name == "nt" else "flux-tools"
    for scheme_dir in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(scheme_dir, exe)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(exe)
    if not found:
        raise FluxToolsError("the flux-tools binary is not installed (pip install flux-tools)")
    return found


def _text(reply: Reply) -> str:
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, str):
        return reply
    return json.dumps(reply)


def _command(args: Sequence[str], manifest: Optional[str]) -> list:
    cmd = [binary()]
    if manifest:
        cmd += ["--manifest", os.fspath(manifest)]
    return cmd + list(args)


def diagnostics(stderr: str) -> list:
    """The diagnostics in what flux-tools wrote on stderr: one dict per `error:` or
    `warning:` block, with its message, where it points (`——▶ FILE:LINE:COL`) and its hint."""
    out: list = []
    for raw in stderr.splitlines():
        line = raw.rstrip()
        for severity in ("error", "warning"):
            if line.startswith(severity + ": "):
                out.append({"severity": severity, "message": line[len(severity) + 2 :],
                            "file": None, "line": None, "column": None, "hint": None})
                break
        else:
            if not out or not line.strip():
                continue
            d = out[-1]
            text = line.strip()
            if text.startswith("——▶ "):
                where = text[len("——▶ "):].rsplit(":", 2)
                if len(where) == 3 and where[1].isdigit() and where[2].isdigit():
                    d["file"], d["line"], d["column"] = where[0], int(where[1]), int(where[2])
                else:
                    d["file"] = text[len("——▶ "):]
            elif "│" not in line and not text.startswith("^"):
                d["hint"] = text if d["hint"] is None else d["hint"] + "\n" + text
    return out


def _error(status: Optional[int], stderr: str) -> "FluxToolsError":
    text = stderr.strip() or f"flux-tools exited {status}"
    return FluxToolsError(text, status=status, diagnostics=diagnostics(stderr))


def _answer(status: int, stdout: str, stderr: str) -> Any:
    if status in ANSWERS:
        text = stdout.strip()
        return json.loads(text) if text else None
    raise _error(status, stderr)


def tools(
    provider: str,
    *,
    names: Optional[Iterable[str]] = None,
    strict: bool = False,
    manifest: Optional[str] = None,
) -> Any:
    """The manifest's tools (or `names` of them) as `provider`'s request takes them:
    `openai`, `openai-responses`, `anthropic` or `gemini`."""
    args = ["tools", "--emit", provider, "-q"]
    if names:
        args += ["--tools", ",".join(names)]
    if strict:
        args.append("--strict")
    p = subprocess.run(_command(args, manifest), capture_output=True, text=True)
    if p.returncode != 0:
        raise _error(p.returncode, p.stderr)
    return json.loads(p.stdout)


def _run_args(emit: Optional[str], extra: Sequence[str], run_id: Optional[str] = None,
              journal: Optional[str] = None) -> list:
    args = ["run", "-", "-q"]
    args += ["--emit", emit] if emit else ["--format", "json"]
    args += ["--run-id", run_id] if run_id else []
    args += ["--journal", os.fspath(journal)] if journal else []
    return args + list(extra)


def run(
    reply: Reply,
    *,
    emit: Optional[str] = None,
    manifest: Optional[str] = None,
    args: Sequence[str] = (),
    run_id: Optional[str] = None,
    journal: Optional[str] = None,
) -> Any:
    """Run a model's reply (or a batch) and return the answer: with `emit`, what the provider's
    loop sends back (e.g. the tool messages); else the results document.

    `run_id` names the intent (`--run-id`): the same reply run again with it, on any machine,
    sends the same idempotency keys. `journal` (`--journal`: a file, or `redis://…` shared by
    every worker) makes running it again resume: finished calls keep their results, a write
    that was in flight is `indeterminate`, nothing is sent twice."""
    p = subprocess.run(
        _command(_run_args(emit, args, run_id, journal), manifest),
        input=_text(reply),
        capture_output=True,
        text=True,
    )
    return _answer(p.returncode, p.stdout, p.stderr)


async def arun(
    reply: Reply,
    *,
    emit: Optional[str] = None,
    manifest: Optional[str] = None,
    args: Sequence[str] = (),
    run_id: Optional[str] = None,
    journal: Optional[str] = None,
) -> Any:
    """`run`, without blocking the event loop."""
    proc = await asyncio.create_subprocess_exec(
        *_command(_run_args(emit, args, run_id, journal), manifest),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(_text(reply).encode())
    return _answer(proc.returncode if proc.returncode is not None else -1, out.decode(), err.decode())


class _Stderr(threading.Thread):
    """Reads a process's stderr as it comes: passes it on to ours (the summary of each turn,
    warnings) and keeps the last 64 KiB, for the error when the process dies."""

    def __init__(self, stream: Any):
        super().__init__(daemon=True)
        self._stream = stream
        self.text = ""

    def run(self) -> None:
        for line in iter(self._stream.readline, ""):
            self.text = (self.text + line)[-65536:]
            try:
                sys.stderr.write(line)
            except (OSError, ValueError):
                pass


class Session:
    """One `flux-tools run --turns` process for a conversation: each `turn(reply)` writes the
    reply as one line and reads its one-line answer. Use it as a context manager (or `close()`).

    A process that cannot start (a bad manifest, a lane store that does not answer) raises
    `FluxToolsError` with its diagnostics and exit status from the constructor, which waits up
    to `start_timeout` seconds (0.3) for such a death; one that dies later raises it from the
    next `turn`."""

    def __init__(
        self,
        *,
        emit: Optional[str] = None,
        manifest: Optional[str] = None,
        args: Sequence[str] = (),
        start_timeout: float = 0.3,
        run_id: Optional[str] = None,
    ):
        turn_args = ["run", "--turns", "-q"]
        turn_args += ["--emit", emit] if emit else []
        # Turn N of a named session is run `RUN_ID-N`: its keys are the same wherever it runs.
        turn_args += ["--run-id", run_id] if run_id else []
        self._proc = subprocess.Popen(
            _command(turn_args + list(args), manifest),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._stderr = _Stderr(self._proc.stderr)
        self._stderr.start()
        self.turns = 0
        try:
            self._proc.wait(timeout=start_timeout)
        except subprocess.TimeoutExpired:
            return
        raise self._died()

    def _died(self) -> "FluxToolsError":
        status = self._proc.wait()
        self._stderr.join(timeout=5)
        return _error(status, self._stderr.text)

    def turn(self, reply: Reply) -> Any:
        """Run one turn; returns its answer, or raises `FluxToolsError` if it could not be read
        (the session goes on) or the process has died (with its exit status and diagnostics)."""
        line = _text(reply).replace("\n", " ")
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
            answer = self._proc.stdout.readline()
        except (BrokenPipeError, ValueError):
            raise self._died() from None
        if not answer:
            raise self._died()
        self.turns += 1
        value = json.loads(answer)
        if isinstance(value, dict) and "error" in value and "turn" in value:
            raise FluxToolsError(value["error"], status=2, diagnostics=value.get("diagnostics"))
        return value

    @property
    def pid(self) -> int:
        """The `flux-tools` process's id."""
        return self._proc.pid

    def close(self) -> int:
        """End the process; returns its exit status (the worst of its turns')."""
        if self._proc.stdin and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:
                pass
        status = self._proc.wait()
        self._stderr.join(timeout=5)
        return status

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def serve_command(
    manifest: Optional[str] = None,
    *,
    tools: Optional[Iterable[str]] = None,
    tenant: Optional[str] = None,
    lane_store: Optional[str] = None,
    max_concurrent_tools: Optional[int] = None,
) -> tuple:
    """`(command, args)` that launch `flux-tools mcp serve` over stdio, for any MCP client.

    Every client launched this way shares the manifest's lanes with every other (the lane
    store is `local` by default: one limit per machine; `redis://…` for many)."""
    args = []
    if manifest is not None:
        args += ["--manifest", os.fspath(manifest)]
    args += ["mcp", "serve"]
    if tools:
        args += ["--tools", ",".join(tools)]
    if tenant is not None:
        args += ["--tenant", tenant]
    if lane_store is not None:
        if _has_password(lane_store):
            # Every user of the machine reads a process's arguments (`ps`).
            raise FluxToolsError(
                "a lane store URL with a password is not put on a command line: use "
                "mcp_server_params(lane_store=…), which passes it in the environment, or set "
                "FLUX_TOOLS_LANE_STORE in the client's environment"
            )
        args += ["--lane-store", lane_store]
    if max_concurrent_tools is not None:
        args += ["--max-concurrent-tools", str(max_concurrent_tools)]
    return binary(), args


def mcp_server_params(manifest: Optional[str] = None, **options: Any) -> dict:
    """The `params` of the OpenAI Agents SDK's `MCPServerStdio` (and the shape most MCP client
    configurations take): `{"command": …, "args": […]}`, and `"env"` with the lane store when
    one is given (a URL may carry a password). Options as `serve_command`."""
    lane_store = options.pop("lane_store", None)
    command, args = serve_command(manifest, **options)
    params = {"command": command, "args": args}
    if lane_store is not None:
        # In the environment, never in the arguments: a URL may carry a password.
        params["env"] = {"FLUX_TOOLS_LANE_STORE": lane_store}
    return params


def _has_password(url: str) -> bool:
    """Whether `url` (`redis://user:password@host`) carries a password."""
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password is not None
    except ValueError:
        return ":" in url.split("@", 1)[0] if "@" in url else False
