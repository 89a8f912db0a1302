#!/usr/bin/env python3
"""Measures a running `waste serve` from a client's side (issues 20 and 45).
Standard library only: raw HTTP, streamed answers, client-side clocks.

  serve_bench.py --port P single     --prompt-tokens 16 --gen 32
      one streamed completion: time to first token, decode tok/s after it
  serve_bench.py --port P concurrent --requests 4 --gen 32 [--agent-words 4000]
      N streamed requests at once: each one's tok/s and the aggregate
      (tokens after each first, over the time from the last first token to
      the end of the last answer: the span where all of them decode)
  serve_bench.py --port P followup   --agent-words 16000 --gen 8 [--save F | --load F]
      an agent's conversation: a first turn over a long prefix, then a
      follow-up turn sharing all of it; each turn's time to first token.
      --save F keeps the conversation after the first turn; --load F sends
      only its follow-up (to a second `waste serve`, or after restarts)

Tokens are counted as the server streams them: every request asks for
logprobs, so each generated token arrives with an entry of its own, text or
not (a random-weight model's tokens are often pieces that print nothing).
The first token's time is that of the first such entry; the count is
checked against the answer's usage, and a mismatch stops the run. Every
request asks for ignore_eos, so a reply runs to max_tokens. Prints JSON
lines.

Agent-shaped prompts (--agent-words N): a system prompt of about N words made of
what a coding agent sends (instructions, files of source code, a tool
list's JSON schemas in the text), the same bytes for every request of a
run, then a user question that differs per request. The token count is the
server's (usage), not N.
"""
import argparse
import http.client
import json
import random
import threading
import time


def stream(port, path, body):
    """Sends a streamed request; returns a dict of start, first, end (clock
    times), usage, text and tokens (entries streamed)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    chat = path.endswith("/chat/completions")
    body = dict(body, stream=True, stream_options={"include_usage": True}, ignore_eos=True,
                logprobs=True if chat else 0)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise SystemExit(f"{r.status}: {r.read()[:400]}")
    first = None
    usage = None
    tokens = 0
    text = []
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            data = event[len(b"data: "):]
            if data == b"[DONE]":
                continue
            j = json.loads(data)
            if j.get("usage"):
                usage = j["usage"]
            for c in j.get("choices", []):
                lp = c.get("logprobs") or {}
                n = len(lp.get("content") or []) if chat else len(lp.get("tokens") or [])
                if n and first is None:
                    first = time.perf_counter()
                tokens += n
                piece = c.get("delta", {}).get("content") if chat else c.get("text")
                if piece:
                    text.append(piece)
    end = time.perf_counter()
    conn.close()
    if first is None or usage is None:
        raise SystemExit(f"{path}: the answer streamed no token or no usage (usage {usage})")
    if tokens != usage["completion_tokens"]:
        raise SystemExit(f"{path}: {tokens} tokens streamed, usage says {usage['completion_tokens']}")
    return {"start": t0, "first": first, "end": end, "usage": usage, "text": "".join(text),
            "tokens": tokens}


def decode_rate(r):
    n = r["tokens"]
    return (n - 1) / (r["end"] - r["first"]) if n > 1 else 0.0


WORDS = ("the value of each request is read from the file and checked before it is used by the "
         "server which keeps a state for every client that asks").split()


def agent_prefix(words, seed=7):
    """About `words` words of what a coding agent sends first, always the same for a seed."""
    rng = random.Random(seed)
    tools = [{"name": f"tool_{i}", "description": " ".join(rng.choices(WORDS, k=12)),
              "parameters": {"type": "object", "properties": {
                  "path": {"type": "string"}, "line": {"type": "integer"},
                  "mode": {"enum": ["read", "write", "append"]}}, "required": ["path"]}}
             for i in range(8)]
    parts = ["You are a coding agent. Answer with a tool call or with the change to make.",
             "Tools: " + json.dumps(tools)]
    n = sum(len(p.split()) for p in parts)
    f = 0
    while n < words:
        lines = [f"// file src/module_{f}.cc"]
        for i in range(40):
            name = "_".join(rng.choices(WORDS, k=2))
            lines.append(f"int {name}_{i}(int x) {{ return x * {rng.randint(2, 99)} + {i}; }}")
        block = "\n".join(lines)
        parts.append(block)
        n += len(block.split())
        f += 1
    return "\n\n".join(parts)


def request(a, i):
    """Request i of a run: a completion of a repeated word, or an agent's chat turn."""
    if a.agent:
        messages = [{"role": "system", "content": agent_prefix(a.agent)},
                    {"role": "user", "content": f"What does function number {i} compute?"}]
        return stream(a.port, "/v1/chat/completions",
                      {"messages": messages, "max_tokens": a.gen, "temperature": 0, "seed": i})
    prompt = " ".join(["the"] * (a.prompt_tokens + i))  # distinct prompts route differently
    return stream(a.port, "/v1/completions",
                  {"prompt": prompt, "max_tokens": a.gen, "temperature": 0, "seed": i})


def single(a):
    r = request(a, 0)
    print(json.dumps({"kind": "single", "prompt_tokens": r["usage"]["prompt_tokens"],
                      "completion_tokens": r["tokens"],
                      "first_token_seconds": r["first"] - r["start"],
                      "decode_tok_s": decode_rate(r)}))


def concurrent(a):
    results = [None] * a.requests
    def one(i):
        results[i] = request(a, i)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(a.requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    last_first = max(r["first"] for r in results)
    last_end = max(r["end"] for r in results)
    # Tokens generated by each after the last first token, estimated at its own rate.
    per = [decode_rate(r) for r in results]
    total_after = sum(rate * max(0.0, r["end"] - last_first) for rate, r in zip(per, results))
    span = last_end - last_first
    print(json.dumps({"kind": "concurrent", "requests": a.requests,
                      "prompt_tokens": [r["usage"]["prompt_tokens"] for r in results],
                      "completion_tokens": [r["tokens"] for r in results],
                      "each_decode_tok_s": per,
                      "aggregate_decode_tok_s": total_after / span if span > 0 else 0.0,
                      "first_token_seconds": [r["first"] - r["start"] for r in results]}))


def followup(a):
    if a.load:
        with open(a.load) as f:
            messages = json.load(f)
        first_turn = None
    else:
        prefix = agent_prefix(a.agent) if a.agent else " ".join(["the"] * a.history)
        messages = [{"role": "system", "content": prefix},
                    {"role": "user", "content": "Read the files and wait for the task."}]
        # The first turn prefills the long prefix; its reply is kept with it.
        first_turn = stream(a.port, "/v1/chat/completions",
                            {"messages": messages, "max_tokens": a.gen, "temperature": 0})
        messages.append({"role": "assistant", "content": first_turn["text"]})
        if a.save:
            with open(a.save, "w") as f:
                json.dump(messages, f)
    r = stream(a.port, "/v1/chat/completions",
               {"messages": messages + [{"role": "user", "content": "Now fix the first function."}],
                "max_tokens": a.gen, "temperature": 0})
    out = {"kind": "followup", "followup_prompt_tokens": r["usage"]["prompt_tokens"],
           "followup_first_token_seconds": r["first"] - r["start"]}
    if first_turn:
        out.update(first_prompt_tokens=first_turn["usage"]["prompt_tokens"],
                   first_first_token_seconds=first_turn["first"] - first_turn["start"])
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    sub = p.add_subparsers(dest="what", required=True)
    for name in ("single", "concurrent"):
        s = sub.add_parser(name)
        s.add_argument("--prompt-tokens", type=int, default=16)
        s.add_argument("--agent-words", dest="agent", type=int, default=0,
                       help="an agent's prompt of about N words")
        s.add_argument("--gen", type=int, default=32)
        if name == "concurrent":
            s.add_argument("--requests", type=int, default=4)
    f = sub.add_parser("followup")
    f.add_argument("--history", type=int, default=2000, help="a repeated word, when not --agent-words")
    f.add_argument("--agent-words", dest="agent", type=int, default=0,
                   help="an agent's prefix of about N words")
    f.add_argument("--gen", type=int, default=8)
    f.add_argument("--save", help="keep the conversation after the first turn in this file")
    f.add_argument("--load", help="send only the follow-up of a conversation --save kept")
    a = p.parse_args()
    {"single": single, "concurrent": concurrent, "followup": followup}[a.what](a)


if __name__ == "__main__":
    main()
