#!/usr/bin/env python3
"""Agent loops against waste serve with the real `openai` and `anthropic`
clients, one `waste serve` per container, on a random-weight container of
each chat family (scripts/openai_check.sh makes them under WORK):

    agent_loop_test.py WASTE WORK

Two tools are offered and a call is forced (OpenAI's tool_choice required
and a named function, Responses' required, Anthropic's any and tool); the
client "runs" each call and sends its result back, and the model answers.
Every call's arguments validate against its tool's schema (jsonschema);
streamed equals whole: the calls (temperature 0) and the answer (chat's
sampled under a seed, Anthropic's greedy). The OpenAI tools are strict; a
strict tool that breaks strict mode's rules is refused; response_format
beside tools and the Responses API's text.format give answers that
validate. Prints one line per check and exits non-zero if any failed.
"""
import json
import os
import sys

import anthropic
import jsonschema
import openai

from serve_client_test import check, failures, start

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "enum": ["Paris", "Lyon", "Oslo"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 6}},
        "required": ["tz"], "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
# Strict (OpenAI's strict mode: the schemas keep its rules).
OPENAI_TOOLS = [{"type": "function", "function": {"name": n, "description": "a tool",
                                                   "parameters": s, "strict": True}}
                for n, s in SCHEMAS.items()]
RESPONSES_TOOLS = [{"type": "function", "name": n, "description": "a tool", "parameters": s,
                    "strict": True} for n, s in SCHEMAS.items()]
ANTHROPIC_TOOLS = [{"name": n, "description": "a tool", "input_schema": s}
                   for n, s in SCHEMAS.items()]
# Families whose answer and calls cannot both be held (serve/api_server.h,
# NotBesideCalls): response_format beside tools is refused.
NOT_BESIDE_CALLS = ("harmony", "demo")
ASK = "What is the weather in Paris for three days, and the time there?"
MAX = 400  # a random model writes long white space; one call fits


# (container under WORK, its chat family): the agent loop runs on each.
LOOPS = [
    ("tiny", "kimi-k2"),  # waste synth --preset tiny-kimi
    ("tiny-qwen3", "qwen3"),
    ("tiny-deepseek", "deepseek-v3.1"),
    ("tiny-glm", "glm-4.5"),
    ("tiny-gpt-oss", "harmony"),
    ("tiny-k3", "k3-xtml"),
    ("demo", "demo"),  # no tool syntax in its template: the generic JSON format
]


def valid(name, args):
    """Whether `args` (a JSON text or a dict) validates against tool `name`'s schema."""
    try:
        jsonschema.validate(json.loads(args) if isinstance(args, str) else args, SCHEMAS[name])
        return True
    except (KeyError, ValueError, jsonschema.ValidationError):
        return False


def run_tool(name, args):
    return json.dumps({"tool": name, "ok": True})


def chat_text(client, stream, **kw):
    """The reply's text, finish_reason and whether it held tool calls, whole or
    streamed (the deltas joined)."""
    if not stream:
        a = client.chat.completions.create(**kw)
        m = a.choices[0].message
        return m.content or "", a.choices[0].finish_reason, bool(m.tool_calls)
    text, finish, calls = "", None, False
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
            calls = calls or bool(c.delta.tool_calls)
    return text, finish, calls


def chat_loop(tag, client, model):
    base = dict(model=model, messages=[{"role": "user", "content": ASK}], tools=OPENAI_TOOLS,
                temperature=0, max_tokens=MAX)
    for choice, parallel in (("required", False),
                             ({"type": "function", "function": {"name": "get_time"}}, False),
                             ("required", True)):
        what = f"{tag} chat tool_choice={json.dumps(choice)} parallel={parallel}"
        whole = client.chat.completions.create(**base, tool_choice=choice,
                                               parallel_tool_calls=parallel)
        msg = whole.choices[0].message
        calls = msg.tool_calls or []
        check(what + ": calls", len(calls) >= 1, str(msg))
        # With parallel calls a random model may write calls until max_tokens
        # cuts the last one: the server still lists it (as OpenAI does) and
        # says finish_reason length; every one before it validates.
        cut = whole.choices[0].finish_reason == "length"
        check(what + ": finish_reason length only when max_tokens cut it",
              whole.choices[0].finish_reason == "tool_calls"
              or (cut and whole.usage.completion_tokens >= MAX), str(whole.choices[0]))
        check(what + ": every call validates" + (" (but the one cut)" if cut else ""),
              all(valid(c.function.name, c.function.arguments)
                  for c in (calls[:-1] if cut else calls)),
              str([(c.function.name, c.function.arguments) for c in calls]))
        if not parallel:
            check(what + ": one call, finish_reason tool_calls",
                  len(calls) == 1 and whole.choices[0].finish_reason == "tool_calls",
                  str(whole))
        if isinstance(choice, dict):
            check(what + ": the named function", all(c.function.name == "get_time" for c in calls))
        # Streamed: the same calls, the arguments possibly in pieces.
        streamed, pieces = {}, 0
        for chunk in client.chat.completions.create(**base, tool_choice=choice,
                                                    parallel_tool_calls=parallel, stream=True):
            for d in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                s = streamed.setdefault(d.index, {"name": "", "arguments": ""})
                if d.function.name:
                    s["name"] = d.function.name
                s["arguments"] += d.function.arguments or ""
                pieces += bool(d.function.arguments)
        check(what + ": streamed equals whole",
              [streamed[i] for i in sorted(streamed)] ==
              [{"name": c.function.name, "arguments": c.function.arguments} for c in calls],
              f"{streamed} vs {calls}")
        check(what + ": arguments streamed in pieces", pieces > len(streamed), str(pieces))
        if parallel or not calls:
            continue
        # The client runs the call and sends the result back; the model answers,
        # sampled, streamed as whole under the same seed.
        messages = base["messages"] + [msg.model_dump(exclude_none=True)] + [
            {"role": "tool", "tool_call_id": c.id, "content": run_tool(c.function.name,
                                                                       c.function.arguments)}
            for c in calls]
        kw = {**base, "messages": messages, "max_tokens": 24, "tool_choice": "none",
              "temperature": 1.0, "seed": 11}
        answer = chat_text(client, False, **kw)
        check(what + ": the model answers the result",
              not answer[2] and answer[1] in ("stop", "length"), str(answer))
        check(what + ": the answer streamed equals whole", chat_text(client, True, **kw) == answer,
              str(answer))


def responses_loop(tag, client, model):
    base = dict(model=model, input=ASK, tools=RESPONSES_TOOLS, temperature=0,
                max_output_tokens=MAX, parallel_tool_calls=False)
    whole = client.responses.create(**base, tool_choice="required")
    calls = [o for o in whole.output if o.type == "function_call"]
    check(f"{tag} responses required: one call", len(calls) == 1, str(whole.output))
    check(f"{tag} responses required: the call validates",
          all(valid(c.name, c.arguments) for c in calls), str(calls))
    with client.responses.stream(**base, tool_choice="required") as s:
        final = s.get_final_response()
    check(f"{tag} responses streamed equals whole",
          [(o.name, o.arguments) for o in final.output if o.type == "function_call"] ==
          [(c.name, c.arguments) for c in calls], f"{final.output} vs {calls}")
    if not calls:
        return
    c = calls[0]
    follow = [{"role": "user", "content": ASK},
              {"type": "function_call", "call_id": c.call_id, "name": c.name,
               "arguments": c.arguments},
              {"type": "function_call_output", "call_id": c.call_id,
               "output": run_tool(c.name, c.arguments)}]
    answer = client.responses.create(model=model, input=follow, tools=RESPONSES_TOOLS,
                                     tool_choice="none", temperature=0, max_output_tokens=24)
    check(f"{tag} responses: the model answers the result",
          not any(o.type == "function_call" for o in answer.output), str(answer.output))


def messages_loop(tag, client, model):
    # anthropic 2.17 has no temperature argument; waste takes it in the body.
    base = dict(model=model, max_tokens=MAX, extra_body={"temperature": 0}, tools=ANTHROPIC_TOOLS,
                messages=[{"role": "user", "content": ASK}])
    for choice in ({"type": "any", "disable_parallel_tool_use": True},
                   {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}):
        what = f"{tag} messages tool_choice={json.dumps(choice)}"
        whole = client.messages.create(**base, tool_choice=choice)
        uses = [b for b in whole.content if b.type == "tool_use"]
        check(what + ": one tool_use, stop_reason tool_use",
              len(uses) == 1 and whole.stop_reason == "tool_use", str(whole))
        check(what + ": input validates", all(valid(u.name, u.input) for u in uses), str(uses))
        if choice["type"] == "tool":
            check(what + ": the named tool", all(u.name == "get_weather" for u in uses))
        with client.messages.stream(**base, tool_choice=choice) as s:
            final = s.get_final_message()
        check(what + ": streamed (input_json_delta) equals whole",
              [(b.name, b.input) for b in final.content if b.type == "tool_use"] ==
              [(u.name, u.input) for u in uses], f"{final.content} vs {uses}")
        if not uses:
            continue
        u = uses[0]
        follow = base["messages"] + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                              for b in whole.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id,
                                          "content": run_tool(u.name, u.input)}]}]
        kw = {**base, "messages": follow, "max_tokens": 24, "tool_choice": {"type": "none"}}
        answer = client.messages.create(**kw)
        check(what + ": the model answers the result",
              not any(b.type == "tool_use" for b in answer.content) and
              answer.stop_reason in ("end_turn", "max_tokens"), str(answer))
        with client.messages.stream(**kw) as s:
            again = s.get_final_message()
        check(what + ": the answer streamed equals whole",
              [b.model_dump() for b in again.content] == [b.model_dump() for b in answer.content]
              and again.stop_reason == answer.stop_reason, f"{again} vs {answer}")


def family_of(container):
    with open(os.path.join(container, "chat.json"), encoding="utf-8") as f:
        return json.load(f).get("family")


def strict_and_formats(tag, family, client, model):
    """A strict tool that breaks strict mode's rules is refused naming its
    parameters; response_format beside tools (auto) gives an answer that
    validates or calls that do (where the family's markup holds both; else
    it is refused naming response_format); the Responses API's text.format
    too."""
    loose = {**WEATHER, "required": ["city"]}
    try:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": ASK}], max_tokens=5,
            tools=[{"type": "function", "function": {"name": "get_weather", "parameters": loose,
                                                     "strict": True}}])
        check(f"{tag} strict: an optional property raises BadRequestError", False, "no error")
    except openai.BadRequestError as e:
        check(f"{tag} strict: an optional property raises BadRequestError",
              e.body.get("param") == "tools[0].function.parameters", str(e))
    answer = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                               "warm": {"type": "boolean"}},
              "required": ["city", "warm"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "strict": True, "schema": answer}}
    if family in NOT_BESIDE_CALLS:
        try:
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": ASK}], tools=OPENAI_TOOLS,
                response_format=fmt, max_tokens=5)
            check(f"{tag} response_format beside tools raises BadRequestError", False, "no error")
        except openai.BadRequestError as e:
            check(f"{tag} response_format beside tools raises BadRequestError",
                  e.body.get("param") == "response_format", str(e))
    for seed in range(0 if family in NOT_BESIDE_CALLS else 4):
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": ASK}], tools=OPENAI_TOOLS,
            response_format=fmt, temperature=1.0, seed=seed, max_tokens=MAX).choices[0]
        calls = r.message.tool_calls or []
        if calls:
            ok = r.finish_reason == "tool_calls" and all(
                valid(c.function.name, c.function.arguments) for c in calls)
        else:
            try:
                ok = r.finish_reason == "stop" and jsonschema.Draft202012Validator(answer).is_valid(
                    json.loads(r.message.content))
            except ValueError:
                ok = False
        check(f"{tag} response_format beside tools, seed {seed}: the answer or the calls validate", ok,
              f"{r.finish_reason}: {r.message}")
    out = client.responses.create(
        model=model, input=ASK, temperature=1.0, max_output_tokens=MAX,
        text={"format": {"type": "json_schema", "name": "a", "strict": True, "schema": answer}})
    try:
        ok = out.status == "completed" and jsonschema.Draft202012Validator(answer).is_valid(
            json.loads(out.output_text))
    except ValueError:
        ok = False
    check(f"{tag} responses text.format json_schema: the answer validates", ok, str(out.output))


def main():
    waste, work = sys.argv[1], sys.argv[2]
    for name, family in LOOPS:
        container = os.path.join(work, name)
        tag = f"[{family} {name}]"
        check(f"{tag} the container chats in {family}", family_of(container) == family,
              str(family_of(container)))
        # A tiny vocabulary spells the tools' description out in many tokens.
        proc, port = start(waste, container, ctx=2048)
        try:
            url = f"http://127.0.0.1:{port}"
            oa = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            an = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
            model = oa.models.list().data[0].id
            chat_loop(tag, oa, model)
            responses_loop(tag, oa, model)
            strict_and_formats(tag, family, oa, model)
            messages_loop(tag, an, model)
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
