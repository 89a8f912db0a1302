#!/usr/bin/env python3
"""waste serve's Anthropic Messages API against the real `anthropic` Python
client, and its Responses API against the real `openai` client's
`responses.create`: scripts/openai_check.sh runs it on a converted model.

    anthropic_client_test.py WASTE CONTAINER

Starts `waste serve CONTAINER --local` (and a second one with an API key),
runs every check, prints one line per check and exits non-zero if any
failed. Greedy replies are compared with the chat completion of the same
conversation: the three APIs answer one model the same.
"""
import os
import sys
import tempfile

import anthropic
import openai

import serve_client_test as common
from serve_client_test import check, start

SYSTEM = "You answer about Python."
QUESTION = "What does the os module do?"


def main():
    waste, container = sys.argv[1], sys.argv[2]
    proc, port = start(waste, container)
    try:
        run_checks(port)
    finally:
        proc.terminate()
        proc.wait(30)
    check_api_key(waste, container)
    print(f"{len(common.failures)} failed" if common.failures else "all passed")
    return 1 if common.failures else 0


def raises(name, kind, call):
    try:
        call()
        check(name, False, "no error")
    except kind as e:
        check(name, True)
        return e
    except Exception as e:  # the wrong kind
        check(name, False, repr(e))


def run_checks(port):
    oai = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    model = oai.models.list().data[0].id
    chat = oai.chat.completions.create(
        model=model, max_tokens=24, temperature=0,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])
    want = chat.choices[0].message.content

    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="unused",
                                 max_retries=0)
    # anthropic 2.17 has no temperature argument any more; waste takes it
    # (greedy, to compare with the chat reply) as Anthropic's API long did.
    ask = dict(model=model, max_tokens=24, system=SYSTEM, extra_body={"temperature": 0},
               messages=[{"role": "user", "content": QUESTION}])
    whole = client.messages.create(**ask)
    text = "".join(b.text for b in whole.content if b.type == "text")
    check("messages: a whole answer is the chat reply", text == want and len(text) > 0,
          f"{text!r} != {want!r}")
    check("messages: the message's fields", whole.type == "message" and
          whole.role == "assistant" and whole.id.startswith("msg_") and whole.model == model,
          repr(whole))
    check("messages: stop_reason and usage",
          whole.stop_reason == ("max_tokens" if chat.choices[0].finish_reason == "length"
                                else "end_turn") and
          whole.usage.input_tokens == chat.usage.prompt_tokens and
          whole.usage.output_tokens == chat.usage.completion_tokens, repr(whole))

    with client.messages.stream(**ask) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    check("messages: streamed text equals whole", streamed == text, f"{streamed!r} != {text!r}")
    check("messages: the stream's final message equals whole",
          [(b.type, b.text) for b in final.content] == [(b.type, b.text) for b in whole.content]
          and final.stop_reason == whole.stop_reason and
          final.usage.output_tokens == whole.usage.output_tokens, repr(final))
    kinds = [e.type for e in client.messages.create(**ask, stream=True)]
    check("messages: the stream's events in Anthropic's order",
          kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"] and
          "content_block_delta" in kinds, repr(kinds))

    count = client.messages.count_tokens(model=model, system=SYSTEM,
                                         messages=[{"role": "user", "content": QUESTION}])
    check("count_tokens: the prompt's tokens", count.input_tokens == whole.usage.input_tokens,
          f"{count.input_tokens} != {whole.usage.input_tokens}")
    blocks = client.messages.count_tokens(
        model=model, system=[{"type": "text", "text": SYSTEM}],
        messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
    bare = client.messages.count_tokens(model=model,
                                        messages=[{"role": "user", "content": QUESTION}])
    check("system prompt: as text blocks the same, and counted",
          blocks.input_tokens == count.input_tokens and bare.input_tokens < count.input_tokens,
          f"{blocks.input_tokens} {count.input_tokens} {bare.input_tokens}")

    stop = text[len(text) // 2:len(text) // 2 + 3]
    cut = client.messages.create(**ask, stop_sequences=[stop])
    cut_text = "".join(b.text for b in cut.content if b.type == "text")
    check("stop_sequences: the reply ends before it, named",
          cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop and
          cut_text == text[:text.find(stop)], f"{stop!r}: {cut!r}")

    e = raises("error: temperature 1.5 is a BadRequestError", anthropic.BadRequestError,
               lambda: client.messages.create(**{**ask, "extra_body": {"temperature": 1.5}}))
    check("error: Anthropic's shape naming the field",
          e is not None and e.body["type"] == "error" and
          e.body["error"]["type"] == "invalid_request_error" and
          "temperature" in e.body["error"]["message"], repr(e and e.body))
    raises("error: an image block is refused", anthropic.BadRequestError,
           lambda: client.messages.create(**{**ask, "messages": [{"role": "user", "content": [
               {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                            "data": "AAAA"}}]}]}))
    raises("error: an unknown model is a NotFoundError", anthropic.NotFoundError,
           lambda: client.messages.create(**{**ask, "model": "claude-nothing"}))

    # OpenAI's Responses API, stateless.
    resp = oai.responses.create(model=model, instructions=SYSTEM, input=QUESTION,
                                max_output_tokens=24, temperature=0, store=False)
    check("responses: a whole answer is the chat reply", resp.output_text == want,
          f"{resp.output_text!r} != {want!r}")
    check("responses: status and usage",
          resp.status == ("incomplete" if chat.choices[0].finish_reason == "length"
                          else "completed") and
          resp.usage.input_tokens == chat.usage.prompt_tokens and
          resp.usage.output_tokens == chat.usage.completion_tokens, repr(resp))
    events = list(oai.responses.create(model=model, instructions=SYSTEM, input=QUESTION,
                                       max_output_tokens=24, temperature=0, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    check("responses: streamed text equals whole", deltas == resp.output_text,
          f"{deltas!r} != {resp.output_text!r}")
    check("responses: the stream's events",
          events[0].type == "response.created" and
          events[-1].type in ("response.completed", "response.incomplete") and
          events[-1].response.output_text == resp.output_text and
          [e.sequence_number for e in events] == list(range(len(events))),
          repr([e.type for e in events]))
    items = oai.responses.create(
        model=model, max_output_tokens=24, temperature=0,
        input=[{"role": "system", "content": SYSTEM},
               {"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}])
    check("responses: message items as the string", items.output_text == want,
          f"{items.output_text!r} != {want!r}")
    raises("responses: previous_response_id is refused", openai.BadRequestError,
           lambda: oai.responses.create(model=model, input=QUESTION, previous_response_id="x"))


def check_api_key(waste, container):
    with tempfile.NamedTemporaryFile("w", suffix=".key", delete=False) as f:
        f.write("test-key-0123456789\n")
    proc, port = start(waste, container, "--api-key-file", f.name)
    try:
        base = f"http://127.0.0.1:{port}"
        bad = anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0)
        raises("auth: a wrong x-api-key is an AuthenticationError", anthropic.AuthenticationError,
               lambda: bad.messages.create(model="waste", max_tokens=2,
                                           messages=[{"role": "user", "content": "hi"}]))
        good = anthropic.Anthropic(base_url=base, api_key="test-key-0123456789", max_retries=0)
        model = openai.OpenAI(base_url=base + "/v1", api_key="test-key-0123456789",
                              max_retries=0).models.list().data[0].id
        reply = good.messages.create(model=model, max_tokens=2,
                                     messages=[{"role": "user", "content": "hi"}])
        check("auth: the right x-api-key is served", reply.type == "message", repr(reply))
    finally:
        proc.terminate()
        proc.wait(30)
        os.unlink(f.name)


if __name__ == "__main__":
    sys.exit(main())
