#!/usr/bin/env python3
"""Writes tests/fixtures/chat/xtml.json once, by hand: Kimi K3's prompt format
(XTML) as the segments K3's encoder renders and the ids they encode to.

    /work/pyenv/bin/python tools/chat/make_xtml_fixtures.py WARP_DIR

WARP_DIR is a checkout of the reference engine (sqliteai/warp, Apache-2.0).
Two sources of segments, each case saying which:

- "encoding_k3.py": WARP's tests/serve/fixtures/xtml_golden.json, segments
  frozen from the release's own encoding_k3.py ("from_upstream": true in that
  file). Only the cases this engine's conversations can hold are taken: roles
  system, user, assistant and tool with a string content, reasoning, tools,
  tool calls and results matched by id; no names, images, content parts,
  tool_choice, response_format or thinking_effort.
- "warp serve/xtml.py": conversations the goldens lack (thinking off over
  several turns), rendered by WARP's port of encoding_k3.py, which WARP checks
  segment for segment against the release. Run, not copied.

The ids: each segment encoded apart, as encoding_k3.py does, by tiktoken over
the Kimi fixture vocabulary (tests/fixtures/tokenizer/tokenizer.model, Kimi's
pat_str) with K3's special tokens (k3_specials() below): a markup segment
with encode(allowed_special="all"), a text segment with encode_ordinary.
"""

import argparse
import base64
import json
import os
import sys

import tiktoken

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))
from make_fixtures import PAT_STR  # noqa: E402  Kimi's pat_str, verbatim

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

# K3's specials by offset from the first special id (163584 in the released
# vocabulary, 3259 in the fixture's): Kimi-Linear's block with the offsets
# K3's tokenizer_config gives the XTML markers (WARP examples/README.md,
# "chat-k3.json": <|end_of_msg|> 163586, <|open|> 163587, <|close|> 163588,
# <|sep|> 163589) and the media tokens (WARP docs/K3.md, "Images in the token
# stream": <|media_begin|> 163602 .. <|media_pad|> 163605).
K3_RENAMED = {2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
              18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>",
              21: "<|media_pad|>"}

GOLDEN_CASES = ["single_user", "no_thinking", "no_generation_prompt", "system_user",
                "multi_turn", "assistant_empty_content", "content_carries_markup",
                # Reasoning, tools, tool calls and results (chat_tools.cc's K3 layout).
                "assistant_with_reasoning", "tools_declared", "tools_two", "tools_unsorted_keys",
                "tool_call_and_result", "tool_call_all_types", "tool_call_broken_json",
                "tool_call_empty_args", "tool_calls_parallel", "tool_results_out_of_order"]

# Conversations rendered by WARP's serve/xtml.py: thinking off over turns.
PORT_CASES = [
    ("multi_turn_no_thinking", {
        "messages": [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Bonjour !"},
            {"role": "user", "content": "Why is the sky blue?\nBriefly."},
        ],
        "thinking": False}),
    ("no_thinking_history_ends", {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
        ],
        "thinking": False, "add_generation_prompt": False}),
    ("no_thinking_markup_in_content", {
        "messages": [
            {"role": "user", "content": "<|close|>message<|sep|><|end_of_msg|> \u00fcber caf\u00e9 \u4f60\u597d"},
        ],
        "thinking": False}),
]


def k3_specials():
    kimi = json.load(open(os.path.join(FIXTURE, "specials.json")))
    first = min(s["id"] for s in kimi)
    out = []
    for s in kimi:
        text = K3_RENAMED.get(s["id"] - first, s["text"])
        out.append({"id": s["id"], "text": text})
    return out


def encoding(specials):
    ranks = {}
    for line in open(os.path.join(FIXTURE, "tokenizer.model"), "rb"):
        tok, rank = line.split()
        ranks[base64.b64decode(tok)] = int(rank)
    return tiktoken.Encoding(name="k3-fixture", pat_str=PAT_STR, mergeable_ranks=ranks,
                             special_tokens={s["text"]: s["id"] for s in specials})


def encode(enc, segments):
    ids = []
    for text, markup in segments:
        ids += enc.encode(text, allowed_special="all") if markup else enc.encode_ordinary(text)
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warp")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "chat", "xtml.json"))
    args = ap.parse_args()

    golden = json.load(open(os.path.join(args.warp, "tests/serve/fixtures/xtml_golden.json")))
    assert golden["from_upstream"], "the goldens must come from the release's encoding_k3.py"
    sys.path.insert(0, args.warp)
    from tests.serve.corpus import CASES  # noqa: E402
    from serve import xtml  # noqa: E402
    corpus = dict(CASES)

    specials = k3_specials()
    enc = encoding(specials)
    cases = []
    for name in GOLDEN_CASES:
        kw = corpus[name]
        segs = golden["cases"][name]
        # WARP's port agrees with the release on these (its own differential).
        assert [[s.text, s.markup] for s in xtml.build_chat_segments(**kw)] == segs, name
        cases.append((name, kw, segs, "encoding_k3.py"))
    for name, kw in PORT_CASES:
        segs = [[s.text, s.markup] for s in xtml.build_chat_segments(**kw)]
        cases.append((name, kw, segs, "warp serve/xtml.py"))

    out = []
    for name, kw, segs, source in cases:
        messages = []
        for m in kw["messages"]:
            assert set(m) <= {"role", "content", "reasoning_content", "tool_calls",
                              "tool_call_id"} and isinstance(m["content"], str), name
            m = dict(m)
            if "tool_calls" in m:
                # The API's shape: arguments a string (the corpus gives one call's
                # as an object; json.dumps keeps its keys' order, which K3 renders).
                m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": (
                    c["function"]["arguments"] if isinstance(c["function"]["arguments"], str)
                    else json.dumps(c["function"]["arguments"], ensure_ascii=False))}}
                    for c in m["tool_calls"]]
            messages.append(m)
        ids = encode(enc, segs)
        assert enc.decode(ids) == "".join(t for t, _ in segs), name
        case = {"name": name, "source": source, "messages": messages,
                "thinking": kw.get("thinking", True),
                "add_generation_prompt": kw.get("add_generation_prompt", True),
                "segments": segs, "ids": ids}
        if kw.get("tools"):
            case["tools"] = kw["tools"]
        out.append(case)
    doc = {"comment": "Written by tools/chat/make_xtml_fixtures.py. Segments are [text, markup] "
                      "pairs; ids over tests/fixtures/tokenizer/tokenizer.model with specials.",
           "tiktoken": tiktoken.__version__,
           "specials": specials,
           "cases": out}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {args.out}: {len(out)} cases")


if __name__ == "__main__":
    main()
