#!/usr/bin/env python3
"""tools/serve_bench/serve_bench.py against `waste serve` (no timing checked).

Usage: serve_bench_test.py WASTE CONTAINER

Runs each of the tool's measurements on small sizes and checks what they
report: every generated token streamed as its own logprobs entry and equal
in number to the usage (the tool stops on a mismatch), agent-shaped prompts
of the same prefix for every request, and a follow-up saved by one
`waste serve` and sent alone to a second one.
"""
import contextlib
import io
import json
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "serve_bench"))
sys.path.insert(0, os.path.dirname(__file__))
import serve_bench  # noqa: E402
from serve_client_test import start  # noqa: E402


def measure(fn, **args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(SimpleNamespace(**args))
    return json.loads(out.getvalue())


def main():
    waste, container = sys.argv[1], sys.argv[2]
    failures = []

    def check(name, ok):
        print(("ok   " if ok else "FAIL ") + name)
        if not ok:
            failures.append(name)

    saved = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"serve_bench_{os.getpid()}.json")
    proc, port = start(waste, container, ctx=4096)
    try:
        s = measure(serve_bench.single, port=port, prompt_tokens=16, agent=0, gen=6)
        check("single: 6 tokens streamed and counted", s["completion_tokens"] == 6)
        c = measure(serve_bench.concurrent, port=port, prompt_tokens=16, agent=120, gen=4,
                    requests=3)
        check("concurrent: 3 answers of 4 tokens", c["completion_tokens"] == [4, 4, 4])
        # The prefix is the same for every request, the questions differ by a digit.
        check("concurrent: agent prompts of one prefix",
              max(c["prompt_tokens"]) - min(c["prompt_tokens"]) <= 2 and c["prompt_tokens"][0] > 120)
        f = measure(serve_bench.followup, port=port, history=0, agent=200, gen=3, save=saved,
                    load=None)
        check("followup: the follow-up holds the first turn",
              f["followup_prompt_tokens"] > f["first_prompt_tokens"] + 3)
    finally:
        proc.terminate()
        proc.wait(30)
    proc, port = start(waste, container, ctx=4096)
    try:
        g = measure(serve_bench.followup, port=port, history=0, agent=0, gen=3, save=None,
                    load=saved)
        check("followup --load: the same follow-up in a second server",
              g["followup_prompt_tokens"] == f["followup_prompt_tokens"])
    finally:
        proc.terminate()
        proc.wait(30)
        os.unlink(saved)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
