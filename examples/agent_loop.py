#!/usr/bin/env python3
"""An agent loop that keeps one `flux-tools run --turns --emit openai` coprocess for a whole
conversation: the model's reply goes in as one line, the tool messages come back as one line.

Standard library only, no network: the "model" is scripted — ten OpenAI chat completions, each
asking for two tool calls from the bundled tools.toml (`echo`, a real process; `system`, `uname`).
At the end it prints what each turn cost, and the same ten replies run as ten separate
`flux-tools run` processes for comparison.

    python3 examples/agent_loop.py            # uses target/release/flux-tools, else PATH
    FLUX_TOOLS=/path/to/flux-tools python3 examples/agent_loop.py
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TURNS = 10


def flux_tools():
    env = os.environ.get("FLUX_TOOLS")
    if env:
        return env
    built = os.path.join(ROOT, "target", "release", "flux-tools")
    return built if os.path.exists(built) else shutil.which("flux-tools") or "flux-tools"


def model(turn, conversation):
    """A scripted model: an OpenAI chat completion asking for two tool calls."""
    calls = [
        {"id": f"call_{turn}_echo", "type": "function",
         "function": {"name": "echo", "arguments": json.dumps({"text": f"turn {turn}: {len(conversation)} messages so far"})}},
        {"id": f"call_{turn}_system", "type": "function",
         "function": {"name": "system", "arguments": "{}"}},
    ]
    return {"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": calls}}]}


def conversation_with_coprocess(binary):
    manifest = os.path.join(ROOT, "tools.toml")
    proc = subprocess.Popen([binary, "--manifest", manifest, "run", "--turns", "--emit", "openai", "-q"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    conversation, costs = [{"role": "user", "content": "Tell me about this machine, ten times."}], []
    for turn in range(1, TURNS + 1):
        reply = model(turn, conversation)
        conversation.append(reply["choices"][0]["message"])
        t0 = time.perf_counter()
        proc.stdin.write(json.dumps(reply) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        costs.append(time.perf_counter() - t0)
        conversation.extend(answer)  # the tool messages, ready for the next model call
        print(f"turn {turn:2}: {costs[-1] * 1000:6.1f} ms  " + " | ".join(m["content"].strip() for m in answer))
    proc.stdin.close()
    status = proc.wait()
    return costs, conversation, status


def separate_processes(binary):
    manifest = os.path.join(ROOT, "tools.toml")
    costs = []
    for turn in range(1, TURNS + 1):
        t0 = time.perf_counter()
        subprocess.run([binary, "--manifest", manifest, "run", "--emit", "openai", "-q"],
                       input=json.dumps(model(turn, [])), capture_output=True, text=True, check=True)
        costs.append(time.perf_counter() - t0)
    return costs


def main():
    binary = flux_tools()
    costs, conversation, status = conversation_with_coprocess(binary)
    tool_messages = sum(1 for m in conversation if m.get("role") == "tool")
    print(f"\n{TURNS} turns through one coprocess: {sum(costs) * 1000:.0f} ms in all, "
          f"median {statistics.median(costs) * 1000:.1f} ms a turn; {tool_messages} tool messages; exit {status}")
    separate = separate_processes(binary)
    print(f"the same {TURNS} replies as separate runs: {sum(separate) * 1000:.0f} ms in all, "
          f"median {statistics.median(separate) * 1000:.1f} ms a turn")
    return 0 if status == 0 and tool_messages == 2 * TURNS else 1


if __name__ == "__main__":
    sys.exit(main())
