#!/usr/bin/env python3
"""waste serve against the real `openai` Python client (and curl for the
exact SSE framing): scripts/openai_check.sh runs it on a converted model.

    serve_client_test.py WASTE CONTAINER

Starts `waste serve CONTAINER --local` on a free port (and a second one with
an API key), runs every check, prints one line per check and exits non-zero
if any failed.
"""
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import jsonschema
import openai

failures = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail), flush=True)
    if not ok:
        failures.append(name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(waste, container, *extra, ctx=1024):
    port = free_port()
    proc = subprocess.Popen([waste, "serve", container, "--local", "--listen", f"127.0.0.1:{port}",
                             "--ctx", str(ctx), "--parallel", "4", "--threads", "2", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("waste serve exited: " + proc.stdout.read())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("waste serve did not become healthy")


def main():
    waste, container = sys.argv[1], sys.argv[2]
    proc, port = start(waste, container)
    try:
        run_checks(waste, container, port)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


CORPUS = os.path.join(os.path.dirname(__file__), "..", "fixtures", "json_schema", "corpus.json")


def check_response_format(client, model, container):
    """response_format json_schema over the whole corpus of
    tests/fixtures/json_schema (its schemas open to extra keys too): every
    reply ends (finish_reason stop, the grammar steering it to its end
    within max_tokens) and validates with jsonschema: 100 of 100 from a
    random-weight model (the tiny container), 20 of 20 from the demo model."""
    with open(CORPUS, encoding="utf-8") as f:
        schemas = json.load(f)["schemas"]
    n = 100 if os.path.basename(container.rstrip("/")) == "tiny" else 20
    valid, ended, failed = 0, 0, []
    for i in range(n):
        s = schemas[i % len(schemas)]
        fmt = {"type": "json_schema",
               "json_schema": {"name": s["name"], "strict": s["strict"], "schema": s["schema"]}}
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Answer in JSON."}], max_tokens=200,
            temperature=1.0, seed=i, response_format=fmt)
        text = r.choices[0].message.content
        ended += r.choices[0].finish_reason == "stop"
        try:
            ok = jsonschema.Draft202012Validator(s["schema"]).is_valid(json.loads(text))
        except ValueError:
            ok = False
        valid += ok and r.choices[0].finish_reason == "stop"
        if not ok and len(failed) < 3:
            failed.append(f"{s['name']} seed {i} ({r.choices[0].finish_reason}): {text[:200]!r}")
    check(f"response_format: {n} of {n} replies end and validate with jsonschema",
          valid == n and ended == n, f"{valid} valid, {ended} ended; " + "; ".join(failed))
    # Streamed equals whole, and json_object gives an object.
    fmt = {"type": "json_object"}
    kw = dict(model=model, messages=[{"role": "user", "content": "An object, please."}],
              max_tokens=300, temperature=1.0, seed=7, response_format=fmt)
    whole = client.chat.completions.create(**kw).choices[0]
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(stream=True, **kw) if c.choices)
    check("response_format: json_object streamed equals whole", streamed == whole.message.content,
          f"{streamed!r} vs {whole.message.content!r}")
    if whole.finish_reason == "stop":
        check("response_format: json_object is an object",
              isinstance(json.loads(whole.message.content), dict), whole.message.content)
    try:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "x"}], max_tokens=5,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "p", "schema": {"type": "string", "pattern": "a"}}})
        check("response_format: an unsupported keyword raises BadRequestError", False, "no error")
    except openai.BadRequestError as e:
        check("response_format: an unsupported keyword raises BadRequestError",
              "'pattern' at #" in str(e), str(e))


def run_checks(waste, container, port):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    models = client.models.list()
    model = models.data[0].id
    check("models lists one model", len(models.data) == 1 and model, str(models))

    messages = [{"role": "system", "content": "You answer about Python."},
                {"role": "user", "content": "What does the os module do?"}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=24,
                                           temperature=0)
    text = whole.choices[0].message.content
    check("chat: a whole answer", isinstance(text, str) and len(text) > 0, repr(whole))
    check("chat: usage", whole.usage.completion_tokens <= 24 and whole.usage.prompt_tokens > 0 and
          whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens,
          str(whole.usage))
    check("chat: finish_reason", whole.choices[0].finish_reason in ("stop", "length"),
          whole.choices[0].finish_reason)
    check("chat: no markup in the reply", "<｜" not in text and "<|" not in text, repr(text))

    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=24,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check("chat: streamed text equals the whole answer", streamed == text, f"{streamed!r} vs {text!r}")
    check("chat: the stream's last chunk carries usage",
          chunks[-1].usage is not None and chunks[-1].usage.completion_tokens ==
          whole.usage.completion_tokens and not chunks[-1].choices, str(chunks[-1]))
    check("chat: the stream's first chunk opens the assistant's turn",
          chunks[0].choices[0].delta.role == "assistant", str(chunks[0]))

    one = client.chat.completions.create(model=model, messages=messages, max_tokens=1, temperature=0)
    check("chat: max_tokens 1", one.usage.completion_tokens == 1 and
          one.choices[0].finish_reason == "length", str(one))
    capped = client.chat.completions.create(model=model, messages=messages,
                                            max_completion_tokens=3, temperature=0)
    check("chat: max_completion_tokens", capped.usage.completion_tokens <= 3, str(capped.usage))

    # A stop string from the middle of the greedy answer cuts it there.
    if len(text) >= 8:
        stop = text[len(text) // 2:len(text) // 2 + 3]
        cut = client.chat.completions.create(model=model, messages=messages, max_tokens=24,
                                             temperature=0, stop=[stop])
        got = cut.choices[0].message.content
        check("chat: a stop string ends the reply before it", got == text[:text.find(stop)] and
              cut.choices[0].finish_reason == "stop", f"stop {stop!r}: {got!r}")

    a = client.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                       temperature=1.0, seed=42)
    b = client.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                       temperature=1.0, seed=42)
    check("chat: the same seed gives the same sample",
          a.choices[0].message.content == b.choices[0].message.content,
          f"{a.choices[0].message.content!r} vs {b.choices[0].message.content!r}")

    # n: two choices of one prompt, each sampled on its own (choice 0 the one
    # n = 1 gives with the seed), the prompt counted once; streamed, each
    # chunk one choice's, and the same texts.
    two = client.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                         temperature=1.0, seed=42, n=2, logprobs=True)
    texts = [c.message.content for c in two.choices]
    check("chat: n 2 gives two choices, by index", [c.index for c in two.choices] == [0, 1],
          str(two.choices))
    check("chat: n's choice 0 is the seed's n 1 sample", texts[0] == a.choices[0].message.content,
          f"{texts[0]!r} vs {a.choices[0].message.content!r}")
    check("chat: n's usage counts the prompt once and both completions",
          two.usage.prompt_tokens == a.usage.prompt_tokens and two.usage.completion_tokens ==
          sum(len(c.logprobs.content) for c in two.choices), str(two.usage))
    nchunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                                  temperature=1.0, seed=42, n=2, stream=True,
                                                  stream_options={"include_usage": True}))
    by_index = {0: "", 1: ""}
    roles = {}
    for c in nchunks:
        for ch in c.choices:
            roles.setdefault(ch.index, ch.delta.role)
            by_index[ch.index] += ch.delta.content or ""
    check("chat: n 2 streamed, each choice's text as whole", [by_index[0], by_index[1]] == texts,
          f"{by_index} vs {texts}")
    check("chat: n 2 streamed, each choice opens with the assistant's role",
          roles == {0: "assistant", 1: "assistant"}, str(roles))
    check("chat: n 2 streamed, one usage chunk last",
          nchunks[-1].usage is not None and not nchunks[-1].choices and
          nchunks[-1].usage.completion_tokens == two.usage.completion_tokens and
          sum(c.usage is not None for c in nchunks) == 1, str(nchunks[-1]))
    ctwo = client.completions.create(model=model, prompt="The :mod:`os` module", max_tokens=8,
                                     temperature=1.0, seed=7, n=2)
    cby = {0: "", 1: ""}
    for c in client.completions.create(model=model, prompt="The :mod:`os` module", max_tokens=8,
                                       temperature=1.0, seed=7, n=2, stream=True):
        for ch in c.choices:
            cby[ch.index] += ch.text
    check("completions: n 2 whole and streamed agree by index",
          [c.index for c in ctwo.choices] == [0, 1] and
          [cby[0], cby[1]] == [c.text for c in ctwo.choices], f"{cby} vs {ctwo.choices}")

    # logit_bias: +100 on one token (" the", as the model's tokenizer has it)
    # makes every greedy token that one, on both routes.
    the = int(subprocess.run([waste, "tokenize", container, " the"], capture_output=True, text=True,
                             check=True).stdout.split()[-1])
    forced = client.chat.completions.create(model=model, messages=messages, max_tokens=6,
                                            temperature=0, logprobs=True,
                                            logit_bias={str(the): 100})
    tokens = [bytes(t.bytes) for t in forced.choices[0].logprobs.content]
    check("chat: a logit_bias of +100 repeats that token",
          forced.usage.completion_tokens == 6 and tokens == [b" the"] * 6 and
          forced.choices[0].message.content == " the" * 6, repr(forced.choices[0]))
    cforced = client.completions.create(model=model, prompt="The :mod:`os` module", max_tokens=6,
                                        temperature=0, logit_bias={str(the): 100})
    check("completions: a logit_bias of +100 repeats that token",
          cforced.choices[0].text == " the" * 6, repr(cforced.choices[0].text))
    # A large penalty moves a greedy reply off the tokens it has used (48
    # tokens: both test models repeat one within them, not within 24).
    def reply(**kw):
        return client.chat.completions.create(model=model, messages=messages, max_tokens=48,
                                              temperature=0, **kw).choices[0].message.content
    plain = reply()
    for name in ["frequency", "presence"]:
        pen = reply(**{f"{name}_penalty": 2.0})
        check(f"chat: a large {name} penalty changes the greedy reply", pen != plain,
              f"{pen!r}")

    lp = client.chat.completions.create(model=model, messages=messages, max_tokens=5,
                                        temperature=0, logprobs=True, top_logprobs=2)
    content = lp.choices[0].logprobs.content
    check("chat: logprobs of every token", len(content) == lp.usage.completion_tokens and
          all(t.logprob <= 0 and len(t.top_logprobs) == 2 and
              t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in content), str(content))

    comp = client.completions.create(model=model, prompt="The :mod:`os` module", max_tokens=12,
                                     temperature=0)
    ctext = comp.choices[0].text
    check("completions: a whole answer", len(ctext) > 0 and comp.usage.completion_tokens <= 12,
          repr(comp))
    cstream = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt="The :mod:`os` module", max_tokens=12, temperature=0, stream=True)
        if c.choices)
    check("completions: streamed equals whole", cstream == ctext, f"{cstream!r} vs {ctext!r}")
    cplain, cpen = (client.completions.create(model=model, prompt="The :mod:`os` module",
                                              max_tokens=48, temperature=0, **kw).choices[0].text
                    for kw in [{}, {"frequency_penalty": 2.0}])
    check("completions: a large frequency penalty changes the greedy reply", cpen != cplain,
          f"{cpen!r}")
    clp = client.completions.create(model=model, prompt="The :mod:`os` module", max_tokens=4,
                                    temperature=0, logprobs=3)
    check("completions: logprobs", len(clp.choices[0].logprobs.tokens) ==
          clp.usage.completion_tokens and all(len(t) == 3 for t in clp.choices[0].logprobs.top_logprobs),
          str(clp.choices[0].logprobs))
    clp0 = client.completions.create(model=model, prompt="The :mod:`os` module", max_tokens=4,
                                     temperature=0, logprobs=0)
    check("completions: logprobs=0 gives the chosen tokens' alone",
          clp0.choices[0].logprobs is not None and
          len(clp0.choices[0].logprobs.token_logprobs) == clp0.usage.completion_tokens and
          all(len(t) == 0 for t in clp0.choices[0].logprobs.top_logprobs),
          str(clp0.choices[0].logprobs))

    # Several at once: each greedy answer as it is alone.
    prompts = ["What is a list?", "Explain the sys module.", "What is a dict?", "How do I read a file?"]
    def ask(p):
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": p}],
                                           max_tokens=12, temperature=0)
        return r.choices[0].message.content
    alone = [ask(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(ask, prompts))
    check("parallel: greedy answers as alone", together == alone, f"{together} vs {alone}")

    # Errors as the client's own exception types.
    def raises(kind, **kw):
        try:
            client.chat.completions.create(model=kw.pop("model", model), messages=messages, **kw)
        except kind as e:
            return True, str(e)
        except Exception as e:  # noqa: BLE001: report what came instead
            return False, f"{type(e).__name__}: {e}"
        return False, "no error"
    for name, kind, kw in [("temperature 5", openai.BadRequestError, {"temperature": 5}),
                           ("max_tokens -1", openai.BadRequestError, {"max_tokens": -1}),
                           ("n past what it holds", openai.BadRequestError, {"n": 100}),
                           ("n 0", openai.BadRequestError, {"n": 0}),
                           ("max_tokens past the context", openai.BadRequestError, {"max_tokens": 5000}),
                           ("an unknown model", openai.NotFoundError, {"model": "no-such-model"}),
                           ("presence_penalty 3", openai.BadRequestError, {"presence_penalty": 3}),
                           ("logit_bias past the vocabulary", openai.BadRequestError,
                            {"logit_bias": {"999999999": 1}}),
                           ("logit_bias 101", openai.BadRequestError, {"logit_bias": {"5": 101}})]:
        ok, detail = raises(kind, **kw)
        check(f"errors: {name} raises {kind.__name__}", ok, detail)

    # A body that is not UTF-8: a 400 that says so, on both routes.
    for path, body in [("chat/completions", b'{"messages": [{"role": "user", "content": "caf\xe9"}]}'),
                       ("completions", b'{"prompt": "\xff\xfe"}')]:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/{path}", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=30)
            check(f"{path}: invalid UTF-8 is a 400 naming it", False, "no error")
        except urllib.error.HTTPError as e:
            err = json.loads(e.read())["error"]
            check(f"{path}: invalid UTF-8 is a 400 naming it",
                  e.code == 400 and "UTF-8" in err["message"], f"{e.code} {err}")
    check_response_format(client, model, container)

    # curl: the exact framing of the stream.
    body = json.dumps({"model": model, "messages": messages, "max_tokens": 4, "temperature": 0,
                       "stream": True})
    out = subprocess.run(["curl", "-sN", "-H", "Content-Type: application/json", "-d", body,
                          f"http://127.0.0.1:{port}/v1/chat/completions"],
                         capture_output=True, text=True, timeout=60).stdout
    events = out.split("\n\n")
    check("curl: events are 'data: ...' separated by blank lines, ending in [DONE]",
          events[-1] == "" and events[-2] == "data: [DONE]" and
          all(e.startswith("data: {") for e in events[:-2]), repr(out[:400]))

    # An API key: refused without it, served with it.
    with tempfile.NamedTemporaryFile("w", suffix=".key", delete=False) as f:
        f.write("test-key-0123456789\n")
    proc2, port2 = start(waste, container, "--api-key-file", f.name)
    try:
        bad = openai.OpenAI(base_url=f"http://127.0.0.1:{port2}/v1", api_key="wrong", max_retries=0)
        try:
            bad.models.list()
            check("auth: a wrong key raises AuthenticationError", False, "no error")
        except openai.AuthenticationError:
            check("auth: a wrong key raises AuthenticationError", True)
        good = openai.OpenAI(base_url=f"http://127.0.0.1:{port2}/v1", api_key="test-key-0123456789",
                             max_retries=0)
        check("auth: the right key is served", len(good.models.list().data) == 1)
    finally:
        proc2.terminate()
        proc2.wait(30)
        os.unlink(f.name)


if __name__ == "__main__":
    sys.exit(main())
