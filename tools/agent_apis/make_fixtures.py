#!/usr/bin/env python3
"""The event streams and whole answers of Anthropic's Messages API and
OpenAI's Responses API for one made-up reply (thinking, text, two tool
calls), each object checked by the real clients' own types, and the
streams folded by the clients' own accumulators into the whole answers.
tests/anthropic_test.cc and tests/responses_test.cc write the same reply
from the same events (serve/anthropic.h, serve/responses.h) and must match.

    python3 tools/agent_apis/make_fixtures.py [--check]   # needs anthropic and openai (PyPI)

--check writes nothing: it fails if the committed fixtures differ from what
it would write (scripts/openai_check.sh runs it with the pinned clients).

Writes tests/fixtures/agent_apis/{anthropic,responses}.json:
{"events": [[name, data], ...], "whole": {...}}.

Checked: every event and the whole answer validate against the client's
pydantic types and declare no field the types lack (extra fields would be
kept silently); the Anthropic stream folded by anthropic's accumulate_event
equals the whole message; the Responses stream folded by openai's
ResponseStreamState gives the whole response's output. Left out of the
Responses usage: the input and output token details (waste does not count
cached or reasoning tokens apart); the clients read the answers unchecked,
so the check allows exactly those two fields missing.
"""
import json
import os
import sys
import typing

import anthropic
import openai
import pydantic
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "agent_apis")


def no_extras(model, where):
    """Every field of the model (and of the models in it) is declared."""
    extra = getattr(model, "model_extra", None) or {}
    assert not extra, f"{where}: fields the client does not declare: {sorted(extra)}"
    for name in type(model).model_fields:
        value = getattr(model, name)
        for i, v in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(v, pydantic.BaseModel):
                no_extras(v, f"{where}.{name}[{i}]")


def anthropic_fixture():
    message = {"id": "msg_fixture", "type": "message", "role": "assistant", "model": "demo",
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 12, "output_tokens": 0}}

    def start(i, block):
        return ["content_block_start", {"type": "content_block_start", "index": i,
                                        "content_block": block}]

    def delta(i, d):
        return ["content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}]

    def stop(i):
        return ["content_block_stop", {"type": "content_block_stop", "index": i}]

    events = [
        ["message_start", {"type": "message_start", "message": message}],
        ["ping", {"type": "ping"}],
        start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
        delta(0, {"type": "thinking_delta", "thinking": "think."}),
        stop(0),
        start(1, {"type": "text", "text": ""}),
        delta(1, {"type": "text_delta", "text": "Sure"}),
        delta(1, {"type": "text_delta", "text": ", calling."}),
        stop(1),
        start(2, {"type": "tool_use", "id": "toolu_abc", "name": "weather", "input": {}}),
        delta(2, {"type": "input_json_delta", "partial_json": "{\"city\": "}),
        delta(2, {"type": "input_json_delta", "partial_json": "\"Paris\"}"}),
        stop(2),
        start(3, {"type": "tool_use", "id": "toolu_def", "name": "time", "input": {}}),
        delta(3, {"type": "input_json_delta", "partial_json": "{}"}),
        stop(3),
        ["message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"input_tokens": 12, "output_tokens": 9}}],
        ["message_stop", {"type": "message_stop"}],
    ]
    whole = dict(message, content=[
        {"type": "thinking", "thinking": "Let me think.", "signature": ""},
        {"type": "text", "text": "Sure, calling."},
        {"type": "tool_use", "id": "toolu_abc", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_def", "name": "time", "input": {}},
    ], stop_reason="tool_use", usage={"input_tokens": 12, "output_tokens": 9})

    adapter = pydantic.TypeAdapter(RawMessageStreamEvent)
    snapshot, bufs = None, {}
    for name, data in events:
        if name == "ping":  # the client skips pings before parsing
            continue
        event = adapter.validate_python(data)
        no_extras(event, name)
        assert event.type == name
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    parsed = Message.model_validate(whole)
    no_extras(parsed, "message")
    folded = snapshot.to_dict()
    # What the accumulator sets itself (to None), never sent.
    assert folded.pop("stop_details", None) is None
    for block in folded["content"]:
        assert block.pop("parsed_output", None) is None
    assert folded == parsed.to_dict(), (folded, parsed.to_dict())
    return {"events": events, "whole": whole}


def responses_fixture():
    echo = {"instructions": None, "tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
            "temperature": 1.0, "top_p": 1.0, "max_output_tokens": None, "metadata": {}}
    head = {"id": "resp_fixture", "object": "response", "created_at": 1700000000,
            "status": "in_progress", "error": None, "incomplete_details": None, "model": "demo",
            "output": [], "usage": None, **echo}
    items = [
        {"type": "reasoning", "id": "rs_fixture_0", "status": "completed", "summary": [],
         "content": [{"type": "reasoning_text", "text": "Hmm."}]},
        {"type": "message", "id": "msg_fixture_1", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}]},
        {"type": "function_call", "id": "fc_fixture_2", "status": "completed",
         "call_id": "call_x", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
    ]
    events = []

    def ev(data):
        events.append([data["type"], dict(data, sequence_number=len(events))])

    ev({"type": "response.created", "response": head})
    ev({"type": "response.in_progress", "response": head})
    # The reasoning item and the message: added, their part added, deltas, done.
    for index, (deltas, delta_type, done_type) in enumerate(
            [(["Hmm", "."], "response.reasoning_text.delta", "response.reasoning_text.done"),
             (["It is ", "sunny."], "response.output_text.delta", "response.output_text.done")]):
        item = items[index]
        empty_part = dict(item["content"][0], text="")
        ev({"type": "response.output_item.added", "output_index": index,
            "item": dict(item, status="in_progress", content=[])})
        ev({"type": "response.content_part.added", "item_id": item["id"], "output_index": index,
            "content_index": 0, "part": empty_part})
        # Text's events carry its logprobs (none asked for); reasoning's do not.
        logprobs = {"logprobs": []} if item["type"] == "message" else {}
        for d in deltas:
            ev({"type": delta_type, "item_id": item["id"], "output_index": index,
                "content_index": 0, "delta": d, **logprobs})
        ev({"type": done_type, "item_id": item["id"], "output_index": index, "content_index": 0,
            "text": item["content"][0]["text"], **logprobs})
        ev({"type": "response.content_part.done", "item_id": item["id"], "output_index": index,
            "content_index": 0, "part": item["content"][0]})
        ev({"type": "response.output_item.done", "output_index": index, "item": item})
    call = items[2]
    ev({"type": "response.output_item.added", "output_index": 2,
        "item": dict(call, status="in_progress", arguments="")})
    for d in ["{\"city\"", ":\"Paris\"}"]:
        ev({"type": "response.function_call_arguments.delta", "item_id": call["id"],
            "output_index": 2, "delta": d})
    ev({"type": "response.function_call_arguments.done", "item_id": call["id"], "output_index": 2,
        "arguments": call["arguments"]})
    ev({"type": "response.output_item.done", "output_index": 2, "item": call})
    whole = dict(head, status="completed", output=items,
                 usage={"input_tokens": 5, "output_tokens": 7, "total_tokens": 12})
    ev({"type": "response.completed", "response": whole})

    # The usage details waste leaves out, filled in for the check only.
    details = {"input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
               "output_tokens_details": {"reasoning_tokens": 0}}

    def checked(data):
        data = json.loads(json.dumps(data))
        r = data.get("response")
        if r and r.get("usage"):
            r["usage"].update(details)
        return data

    # Each event checked against its own type's class (the union's errors
    # would list every other class too).
    classes = {typing.get_args(c.model_fields["type"].annotation)[0]: c
               for c in typing.get_args(typing.get_args(ResponseStreamEvent)[0])}
    state = ResponseStreamState(input_tools=openai.omit, text_format=openai.omit)
    final = None
    for name, data in events:
        event = classes[name].model_validate(checked(data))
        no_extras(event, name)
        assert event.type == name
        for out in state.handle_event(event):
            if out.type == "response.completed":
                final = out.response
    parsed = Response.model_validate(checked({"response": whole})["response"])
    no_extras(parsed, "response")
    assert final is not None
    # The accumulator's own fields (parsed, parsed_arguments) are None: left out.
    def fields(items):
        return [o.to_dict(exclude_none=True) for o in items]

    assert fields(final.output) == fields(parsed.output), final
    assert final.output_text == "It is sunny."
    return {"events": events, "whole": whole}


def main():
    check = sys.argv[1:] == ["--check"]
    os.makedirs(OUT, exist_ok=True)
    stale = []
    for name, fixture in [("anthropic", anthropic_fixture()), ("responses", responses_fixture())]:
        path = os.path.join(OUT, name + ".json")
        text = json.dumps(fixture, indent=1) + "\n"
        if check:
            with open(path) as f:
                if f.read() != text:
                    stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
    versions = f"anthropic {anthropic.__version__}, openai {openai.__version__}"
    if stale:
        sys.exit(f"{versions}: the committed fixtures differ: {stale}")
    print(f"{versions}: fixtures " + ("as committed" if check else "written"))


if __name__ == "__main__":
    main()
