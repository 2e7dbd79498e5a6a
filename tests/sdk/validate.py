"""Validate what `flux-tools run --emit PROVIDER` printed with that provider's own SDK types.

    flux-tools run REPLY.json --emit PROVIDER [--stream] | python validate.py PROVIDER [--stream]

Whole-run output is the document the provider's loop sends back (an array of messages or
items, or one message/content); with --stream, one item per line. Prints one line per item
checked; exits 1 naming the first item the SDK refuses.
"""

import json
import sys

from pydantic import TypeAdapter


def adapters():
    from openai.types.chat import ChatCompletionToolMessageParam
    from openai.types.responses.response_input_item_param import FunctionCallOutput
    from openai.types.responses import ResponseInputItemParam
    from anthropic.types import MessageParam, ToolResultBlockParam
    from google.genai import types

    def strict(tp):
        adapter = TypeAdapter(tp)
        return lambda v: adapter.validate_python(v, strict=True)

    return {
        # provider: (validate the whole document, validate one streamed item)
        "openai": (
            lambda doc: [strict(ChatCompletionToolMessageParam)(m) for m in doc],
            strict(ChatCompletionToolMessageParam),
        ),
        "openai-responses": (
            lambda doc: [(strict(FunctionCallOutput)(i), strict(ResponseInputItemParam)(i)) for i in doc],
            lambda i: (strict(FunctionCallOutput)(i), strict(ResponseInputItemParam)(i)),
        ),
        "anthropic": (
            lambda doc: (strict(MessageParam)(doc), [strict(ToolResultBlockParam)(b) for b in doc["content"]]),
            strict(ToolResultBlockParam),
        ),
        "gemini": (
            lambda doc: types.Content.model_validate(doc, strict=False),
            lambda part: types.Part.model_validate(part),
        ),
    }


def check_shape(provider, value, whole):
    """What TypedDict validation cannot see: required keys and their types."""
    items = value if isinstance(value, list) else [value]
    if provider == "anthropic" and whole:
        assert value["role"] == "user" and value["content"], value
        items = value["content"]
    if provider == "gemini" and whole:
        assert value["role"] == "user" and value["parts"], value
        items = value["parts"]
    for it in items:
        if provider == "openai":
            assert it["role"] == "tool" and isinstance(it["tool_call_id"], str), it
            assert isinstance(it["content"], str), it
        elif provider == "openai-responses":
            assert it["type"] == "function_call_output" and isinstance(it["call_id"], str), it
        elif provider == "anthropic":
            assert it["type"] == "tool_result" and isinstance(it["tool_use_id"], str), it
        elif provider == "gemini":
            fr = it["functionResponse"]
            assert isinstance(fr["name"], str) and isinstance(fr["response"], dict), it


def check_tools(provider, doc):
    """`flux-tools tools --emit PROVIDER`: the request's `tools`, as each SDK types them."""
    from openai.types.chat import ChatCompletionToolParam
    from openai.types.responses import FunctionToolParam
    from anthropic.types import ToolParam
    from google.genai import types

    def strict(tp, v):
        TypeAdapter(tp).validate_python(v, strict=True)

    names = []
    if provider == "openai":
        for t in doc:
            strict(ChatCompletionToolParam, t)
            f = t["function"]
            assert t["type"] == "function" and f["parameters"]["type"] == "object", t
            names.append(f["name"])
    elif provider == "openai-responses":
        for t in doc:
            strict(FunctionToolParam, t)
            assert t["type"] == "function" and isinstance(t["strict"], bool), t
            names.append(t["name"])
    elif provider == "anthropic":
        for t in doc:
            strict(ToolParam, t)
            assert t["input_schema"]["type"] == "object", t
            names.append(t["name"])
    elif provider == "gemini":
        for tool in doc:
            parsed = types.Tool.model_validate(tool)
            for d in parsed.function_declarations:
                assert d.parameters_json_schema["type"] == "object", d
                names.append(d.name)
    import re
    for n in names:
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_-]{0,63}", n), f"name {n!r} breaks a provider's rule"
    print(f"{provider}: {len(names)} tool definition(s) valid")


def main():
    provider = sys.argv[1]
    if "--tools" in sys.argv[2:]:
        check_tools(provider, json.loads(sys.stdin.read()))
        return 0
    stream = "--stream" in sys.argv[2:]
    whole_check, item_check = adapters()[provider]
    text = sys.stdin.read()
    if stream:
        values = [json.loads(line) for line in text.splitlines() if line.strip()]
        for v in values:
            item_check(v)
            check_shape(provider, v, whole=False)
        print(f"{provider}: {len(values)} streamed item(s) valid")
        return 0
    if not text.strip():
        print(f"{provider}: no output")
        return 0
    doc = json.loads(text)
    whole_check(doc)
    check_shape(provider, doc, whole=True)
    print(f"{provider}: document valid")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # the SDK's refusal, shown whole
        print(f"{sys.argv[1]}: REFUSED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
