"""Build model replies with the providers' own SDK types and write them as the JSON those
SDKs produce (`model_dump_json()`), into tests/fixtures/sdk/. The fixtures are committed;
run this again (in a virtualenv with openai, anthropic and google-genai) to refresh them.

Each provider gets three replies, the same in substance:
  mixed     one good call whose argument holds a literal `${…}`, one unknown tool, one call
            whose arguments are not valid JSON (or not an object), and one more good call
  literal   one call to `echo` whose arguments hold `${…}` text in several forms
  none      a reply with no tool calls at all (plain text)
  usage     one call, from a named model, with the token usage the provider reports
"""

import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "sdk"

TEMPLATE = "Hello ${name}! use ${toolu_A.city} as placeholder; $${x}; `echo ${HOME}`"


def openai_chat():
    from openai.types.chat import ChatCompletion, ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice
    from openai.types.chat import ChatCompletionMessageFunctionToolCall as Call
    from openai.types.chat.chat_completion_message_function_tool_call import Function

    from openai.types import CompletionUsage

    def reply(calls, content=None, model="gpt-test", usage=None):
        msg = ChatCompletionMessage(role="assistant", content=content, tool_calls=calls or None)
        choice = Choice(index=0, message=msg, finish_reason="tool_calls" if calls else "stop")
        return ChatCompletion(id="chatcmpl-1", object="chat.completion", created=1,
                              model=model, choices=[choice], usage=usage)

    def call(cid, name, args):
        return Call(id=cid, type="function", function=Function(name=name, arguments=args))

    return {
        "mixed": reply([
            call("call_Ok1", "echo", json.dumps({"text": TEMPLATE})),
            call("call_Unknown2", "serch", json.dumps({"query": "x"})),
            call("call_Bad.3/x", "echo", '{"text": "unterminated'),
            call("call_Ok4", "lookup", json.dumps({"city": "Paris"})),
        ]),
        "literal": reply([call("call_Lit1", "echo", json.dumps({"text": TEMPLATE}))]),
        "none": reply([], content="Nothing to do."),
        "usage": reply([call("call_U1", "lookup", json.dumps({"city": "Paris"}))],
                       model="gpt-4o-2024-08-06",
                       usage=CompletionUsage(prompt_tokens=1200, completion_tokens=85,
                                             total_tokens=1285)),
    }


def openai_responses():
    from openai.types.responses import Response, ResponseFunctionToolCall, ResponseOutputMessage
    from openai.types.responses.response_output_text import ResponseOutputText

    from openai.types.responses.response_usage import (ResponseUsage, InputTokensDetails,
                                                        OutputTokensDetails)

    def reply(items, model="gpt-test", usage=None):
        return Response(id="resp_1", object="response", created_at=1, model=model,
                        output=items, parallel_tool_calls=True, tool_choice="auto", tools=[],
                        usage=usage)

    def call(cid, name, args):
        return ResponseFunctionToolCall(type="function_call", id="fc_" + cid, call_id=cid,
                                        name=name, arguments=args, status="completed")

    text = ResponseOutputMessage(type="message", id="msg_1", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text="Nothing to do.",
                                                             annotations=[])])
    return {
        "mixed": reply([
            call("call_Ok1", "echo", json.dumps({"text": TEMPLATE})),
            call("call_Unknown2", "serch", json.dumps({"query": "x"})),
            call("call_Bad3", "echo", "[1, 2]"),
            call("call_Ok4", "lookup", json.dumps({"city": "Paris"})),
        ]),
        "literal": reply([call("call_Lit1", "echo", json.dumps({"text": TEMPLATE}))]),
        "none": reply([text]),
        "usage": reply([call("call_U1", "lookup", json.dumps({"city": "Paris"}))],
                       model="gpt-4.1-mini",
                       usage=ResponseUsage(input_tokens=2000, output_tokens=150, total_tokens=2150,
                                           input_tokens_details=InputTokensDetails(cached_tokens=0,
                                                                                  cache_write_tokens=0),
                                           output_tokens_details=OutputTokensDetails(
                                               reasoning_tokens=0))),
    }


def anthropic_messages():
    from anthropic.types import Message, TextBlock, ToolUseBlock, Usage

    def reply(blocks, stop, model="claude-test", usage=None):
        return Message(id="msg_1", type="message", role="assistant", model=model,
                       content=blocks, stop_reason=stop, stop_sequence=None,
                       usage=usage or Usage(input_tokens=1, output_tokens=1))

    def call(cid, name, args):
        return ToolUseBlock(type="tool_use", id=cid, name=name, input=args)

    return {
        "mixed": reply([
            TextBlock(type="text", text="Let me look."),
            call("toolu_Ok1", "echo", {"text": TEMPLATE}),
            call("toolu_Unknown2", "serch", {"query": "x"}),
            call("toolu_Bad3", "lookup", {"city": 42}),
            call("toolu_Ok4", "lookup", {"city": "Paris"}),
        ], "tool_use"),
        "literal": reply([call("toolu_Lit1", "echo", {"text": TEMPLATE})], "tool_use"),
        "none": reply([TextBlock(type="text", text="Nothing to do.")], "end_turn"),
        "usage": reply([call("toolu_U1", "lookup", {"city": "Paris"})], "tool_use",
                       model="claude-sonnet-4-5-20250929",
                       usage=Usage(input_tokens=1500, output_tokens=120,
                                   cache_creation_input_tokens=0, cache_read_input_tokens=300)),
    }


def gemini():
    from google.genai import types

    def reply(parts, model=None, usage=None):
        content = types.Content(role="model", parts=parts)
        return types.GenerateContentResponse(
            candidates=[types.Candidate(content=content, finish_reason="STOP", index=0)],
            model_version=model, usage_metadata=usage)

    def call(name, args, cid=None):
        return types.Part(function_call=types.FunctionCall(name=name, args=args, id=cid))

    return {
        "mixed": reply([
            call("echo", {"text": TEMPLATE}),
            call("serch", {"query": "x"}, cid="g-unknown-2"),
            call("lookup", {"city": 42}),
            call("lookup", {"city": "Paris"}, cid="g-ok-4"),
        ]),
        "literal": reply([call("echo", {"text": TEMPLATE}, cid="g-lit-1")]),
        "none": reply([types.Part(text="Nothing to do.")]),
        "usage": reply([call("lookup", {"city": "Paris"}, cid="g-u-1")],
                       model="gemini-2.5-flash",
                       usage=types.GenerateContentResponseUsageMetadata(
                           prompt_token_count=900, candidates_token_count=40,
                           total_token_count=940)),
    }


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for provider, make in [("openai", openai_chat), ("openai-responses", openai_responses),
                           ("anthropic", anthropic_messages), ("gemini", gemini)]:
        for name, reply in make().items():
            path = OUT / f"{provider}-{name}.json"
            # Exactly what the SDK writes: one line, as `model_dump_json()` gives it.
            path.write_text(reply.model_dump_json() + "\n")
            print(path.relative_to(OUT.parent.parent.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
