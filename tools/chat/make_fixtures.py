#!/usr/bin/env python3
"""Writes tests/fixtures/chat/chat.json: the token ids of conversations as
each family's released chat template renders them, for tests/chat_test.cc.

    python tools/chat/make_fixtures.py --deepseek-v31-tools TEMPLATE   (transformers, tiktoken, regex)
    python tools/chat/make_fixtures.py --only FAMILY   (that family's entry of chat.json alone)

TEMPLATE is vLLM's examples/tool_chat_template_deepseekv31.jinja (Apache-2.0,
not committed): DeepSeek-V3.1's released template does not render `tools`;
that one writes them as its model card ("ToolCall") says, and renders the
DeepSeek-V3.1 agent cases.

Families and what renders and tokenizes them:
  demo      models/demo-moe/tokenizer_config.json's chat_template and its
            tokenizer.json, through transformers' apply_chat_template
  deepseek  DeepSeek-V3's released template (tests/fixtures/chat/deepseek-v3.jinja)
            with DeepSeek's released tokenizer.json (tests/fixtures/tokenizer/deepseek/),
            through apply_chat_template
  deepseek-v3.1  DeepSeek-V3.1's (deepseek-v3.1.jinja, thinking off, its default) with
            the same tokenizer; its agent cases through TEMPLATE, each checked to
            differ from the released template's text only by the tools section
  qwen3     Qwen3's released template (tests/fixtures/chat/qwen3.jinja) with
            enable_thinking=False (waste's default) over the Qwen3 tokenizer fixture
            (tests/fixtures/tokenizer/qwen3/: Qwen's normalizer, pattern and specials)
  qwen3.5   Qwen3.6's released template (qwen3.6.jinja, Qwen3.5's tool syntax) with
            enable_thinking=False over the same Qwen3 tokenizer fixture (its specials are
            the ones the template writes); the conversations it raises on (a system
            message not first) are kept as "refused" cases, every text stripped as it strips
  glm45     GLM-4.6's released template (glm-4.6.jinja, GLM-4.5's markup), enable_thinking=False,
            over the GLM-4.5 tokenizer fixture (tests/fixtures/tokenizer/glm45/)
  gpt-oss   GPT-OSS's released harmony template (gpt-oss.jinja), the current date fixed at
            DATE (the template reads the clock: strftime_now), over the o200k_harmony
            fixture (tests/fixtures/tokenizer/gpt-oss/)
  kimi      Kimi K2's released template (tests/fixtures/chat/kimi-k2.jinja, Kimi-Linear's
            style) rendered by transformers' own Jinja renderer, tokenized as Kimi's
            tokenizer does (tiktoken's encode with every special allowed) over the Kimi
            fixture vocabulary (tests/fixtures/tokenizer/tokenizer.model, specials.json)

apply_chat_template tokenizes the rendered text with add_special_tokens=False:
the template's own bos_token is the only BOS. It also reads special-token
text inside a message as the special token. The engine keeps message content
plain text (a user cannot forge markup), so every case is tokenized here the
same way with the content protected: the text is rendered with a sentinel in
place of each message's content, split at the special tokens outside the
content, and each run between specials encoded as plain text (tokenizers'
pre-tokenizer and BPE model alone; tiktoken's encode_ordinary). For every case
whose content holds no special-token text the script asserts that this equals
apply_chat_template's own ids (kimi: tiktoken's encode of the rendered text);
the cases that hold some are marked "content_has_special_text" and the script
asserts that they differ from it (so the case tests something).
"""
import argparse
import base64
import datetime
import json
import os
import re
import sys

import jinja2
import tiktoken
import transformers
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "chat")
sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))
from make_fixtures import PAT_STR  # noqa: E402  Kimi's pattern, as the tokenizer fixture uses it

DATE = "2026-01-15"  # harmony's "Current date:", the cases' "date"


class FixedDate(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 15, 12, 0, 0)


# transformers' strftime_now reads datetime.now: the date is an input here.
transformers.utils.chat_template_utils.datetime = FixedDate

DS_USER = "<\uff5cUser\uff5c>"
DS_EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"


def conversations(specials_text):
    sys_ = {"role": "system", "content": "You are terse."}
    return [
        ("one_turn", [{"role": "user", "content": "Hello!"}], True),
        ("system_one_turn", [sys_, {"role": "user", "content": "What is 2+2?"}], True),
        ("several_turns", [sys_,
                           {"role": "user", "content": "Name a color."},
                           {"role": "assistant", "content": "Blue."},
                           {"role": "user", "content": "Another?"},
                           {"role": "assistant", "content": " Green, and red."},
                           {"role": "user", "content": "Thanks"}], True),
        ("ends_with_assistant", [{"role": "user", "content": "Hi"},
                                 {"role": "assistant", "content": "Hello."}], False),
        ("no_generation_prompt", [sys_, {"role": "user", "content": "Hi"}], False),
        ("newlines", [{"role": "user", "content": "line one\n\n  line two\n\tend\n"},
                      {"role": "assistant", "content": "\nok\n"},
                      {"role": "user", "content": "\n"}], True),
        ("unicode", [{"role": "system", "content": "Réponds en français 🙂"},
                     {"role": "user", "content": "日本語で？ Ελληνικά, emoji 👩‍💻 and ﬁ ligature"}],
         True),
        ("two_systems", [sys_, {"role": "user", "content": "a"},
                         {"role": "assistant", "content": "b"},
                         {"role": "system", "content": "Be kind."},
                         {"role": "user", "content": "c"}], True),
        ("empty_content", [{"role": "system", "content": ""}, {"role": "user", "content": ""}], True),
        ("special_text_in_content",
         [{"role": "user", "content": "Say " + " and ".join(specials_text) + " please"},
          {"role": "assistant", "content": "I said " + specials_text[0]},
          {"role": "user", "content": specials_text[-1]}], True),
    ]


# Two tools with nested parameter schemas, keys in a client's order (not
# sorted), non-ASCII text (tojson keeps it: ensure_ascii=False).
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city — now or on a day",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Zürich"},
            "when": {"type": "object", "description": "The day", "properties": {
                "date": {"type": "string"}, "hourly": {"type": "boolean"}},
                "required": ["date"]},
            "units": {"type": "string", "enum": ["c", "f"], "default": "c"},
            "days": {"type": "integer", "description": "How many", "default": 1}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search_flights",
        "description": "Flights between two airports",
        "parameters": {"type": "object", "properties": {
            "from": {"type": "string"}, "to": {"type": "string"},
            "passengers": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}}},
            "classes": {"type": "array", "items": {"type": "string"}},
            "note": {"type": "string", "nullable": True},
            "max_price": {"type": "number"}},
            "required": ["from", "to"]}}},
]


def call(i, name, arguments):
    # OpenAI's shape: the arguments a JSON object's text.
    return {"id": "call_%d" % i, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


CALL_WEATHER = call(1, "get_weather", {"city": "Zürich", "when": {"date": "2026-01-16", "hourly": False}})
CALL_FLIGHTS = call(2, "search_flights", {"from": "ZRH", "to": "CDG", "passengers": [
    {"name": "Ann", "age": 34}], "max_price": 250.5})


def tool_conversations():
    """(name, messages, add_generation_prompt, tools offered). A content the
    API sends as null is "" here: Qwen3's, Kimi's and harmony's templates
    fail on None and GLM's prints "None"; the engine renders null as ""."""
    sys_ = {"role": "system", "content": "You are terse."}
    user = {"role": "user", "content": "Weather in Zürich tomorrow, and flights to Paris?"}
    one = {"role": "assistant", "content": "", "tool_calls": [CALL_WEATHER]}
    two = {"role": "assistant", "content": "Checking both.", "tool_calls": [CALL_WEATHER, CALL_FLIGHTS]}
    res1 = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": -2, "sky": "snow"}'}
    res2 = {"role": "tool", "tool_call_id": "call_2", "content": "3 flights from 180 EUR"}
    answer = {"role": "assistant", "content": "Snow, -2 °C; flights from 180 EUR."}
    return [
        ("tools_with_system", [sys_, user], True, True),
        ("tools_no_system", [user], True, True),
        ("one_call_one_result", [user, one, res1], True, True),
        ("two_calls_with_text_two_results", [sys_, user, two, res1, res2], True, True),
        ("two_calls_no_generation_prompt", [user, {**two, "content": ""}, res1, res2], False, True),
        ("next_turn_after_results", [user, one, res1, answer,
                                     {"role": "user", "content": "Thanks"}], True, True),
        ("call_with_text", [user, {**one, "content": "Let me look."}, res1], True, True),
        ("call_with_text_then_answer", [user, {**one, "content": "Let me look."}, res1, answer,
                                        {"role": "user", "content": "Thanks"}], True, True),
        ("two_calls_in_turn", [sys_, user, one, res1,
                               {"role": "assistant", "content": "", "tool_calls": [CALL_FLIGHTS]},
                               res2], True, True),
        ("reasoning_then_call", [user, {**one, "reasoning_content": "\nThe user wants the "
                                         "weather first; call get_weather.\n"}, res1], True, True),
        ("past_calls_no_tools_offered", [sys_, user, two, res1, res2, answer,
                                         {"role": "user", "content": "And Monday?"}], True, False),
    ]


# What each family's template renders of tools (the rest is refused by the
# engine by name): DeepSeek-V3.1's tools as vLLM's template writes them
# (TEMPLATE above); Kimi K2's renders `tools` and tool results and drops an
# assistant's tool_calls (the engine drops them too).
TOOL_CASES = {
    "qwen3": {"tools": True, "calls": True},
    "qwen3.5": {"tools": True, "calls": True},
    "glm45": {"tools": True, "calls": True},
    "deepseek-v3.1": {"tools": True, "calls": True},
    "kimi": {"tools": True, "calls": True},
    # Harmony's template renders the first call of a message only (refused
    # beyond it), an assistant's reasoning as its "thinking".
    "gpt-oss": {"tools": True, "calls": True, "one_call": True},
}
# Thinking switched per request: the template's argument and the values rendered.
THINKING = {"qwen3": "enable_thinking", "qwen3.5": "enable_thinking", "glm45": "enable_thinking", "deepseek-v3.1": "thinking"}


def protected_ids(render, encode_plain, special_texts, messages, gen, shown=None, **kw):
    """Renders with content protected and tokenizes as described above.
    `shown(message)` is the text the template puts of a message (GLM strips
    an assistant's), the content itself when None."""
    marked = []
    for i, m in enumerate(messages):
        # An empty content stays empty (harmony drops an empty system message).
        marked.append({**m, "content": "\ue000%d\ue001" % i if m["content"] else ""})
    text = render(marked, gen, **kw)
    pat = re.compile("|".join(re.escape(s) for s in sorted(special_texts, key=len, reverse=True)))
    ids, run = [], ""
    for piece in re.split("(\ue000\\d+\ue001)", text):
        m = re.fullmatch("\ue000(\\d+)\ue001", piece)
        if m:
            msg = messages[int(m.group(1))]
            run += shown(msg) if shown else msg["content"]
            continue
        pos = 0
        for sm in pat.finditer(piece):
            run += piece[pos:sm.start()]
            if run:
                ids += encode_plain(run)
            run = ""
            ids.append(special_texts[sm.group(0)])
            pos = sm.end()
        run += piece[pos:]
    if run:
        ids += encode_plain(run)
    full_text = render(messages, gen, **kw)
    return full_text, ids


def hf_family(name, tok_dir, template, **kwargs):
    tok = AutoTokenizer.from_pretrained(tok_dir)
    specials = {t.content: i for i, t in tok.added_tokens_decoder.items()}
    bos = tok.bos_token

    def render(msgs, gen, **kw):
        return tok.apply_chat_template(msgs, chat_template=template, add_generation_prompt=gen,
                                       tokenize=False, **{**kwargs, **kw})

    # Plain text: the normalizer (Qwen's NFC), the pre-tokenizer and the BPE
    # model alone, no added token matched (split_special_tokens would still
    # match those not marked special).
    backend = tok.backend_tokenizer

    def plain(s):
        if backend.normalizer is not None:
            s = backend.normalizer.normalize_str(s)
        return [t.id for piece, _ in backend.pre_tokenizer.pre_tokenize_str(s)
                for t in backend.model.tokenize(piece)]

    def whole(msgs, gen, **kw):
        return list(tok.apply_chat_template(msgs, chat_template=template, add_generation_prompt=gen,
                                            tokenize=True, return_dict=False, **{**kwargs, **kw}))

    return render, plain, whole, specials, bos


def kimi_family():
    fx = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
    ranks = {}
    with open(os.path.join(fx, "tokenizer.model")) as f:
        for line in f:
            b, r = line.split()
            ranks[base64.b64decode(b)] = int(r)
    with open(os.path.join(fx, "specials.json")) as f:
        specials = {s["text"]: s["id"] for s in json.load(f)}
    enc = tiktoken.Encoding(name="kimi-chat", pat_str=PAT_STR, mergeable_ranks=ranks,
                            special_tokens=specials)
    with open(os.path.join(OUT, "kimi-k2.jinja")) as f:
        template = f.read()

    def render(msgs, gen, **kw):
        return render_jinja_template(conversations=[msgs], chat_template=template,
                                     add_generation_prompt=gen, **kw)[0][0]

    def whole(msgs, gen, **kw):
        return enc.encode(render(msgs, gen, **kw), allowed_special="all")

    return render, enc.encode_ordinary, whole, specials, None, template


def without_layout(template):
    """vLLM's template is laid out for reading, and Jinja outputs its
    indentation and blank lines between tags (two newlines before the BOS,
    spaces before <｜Assistant｜>), which neither the model card nor the
    released template has: that whitespace is dropped, after checking that
    nothing but whitespace stands outside the tags (every character the
    template means to write is an expression's)."""
    tag = r"{%.*?%}|{{.*?}}"
    assert not re.sub(tag, "", template, flags=re.S).strip()
    return re.sub(r"(?<=%}|}})\s+(?={%|{{)", "", template).strip()


def only_tools_differ(released, text, cname):
    """The released template's text is `text` without the tools section: the
    same up to the end of the system prompt and from the first user turn."""
    head, user, tail = text.partition(DS_USER)
    rhead, ruser, rtail = released.partition(DS_USER)
    assert user and ruser and tail == rtail, cname
    assert head.startswith(rhead) and (head == rhead) == ("## Tools" not in head), cname


def agent_cases(name, render, plain, whole, specials, texts, released=None):
    """Tools, tool calls and results (TOOL_CASES), thinking switched on and off
    (THINKING) and harmony's reasoning effort, each case with the template
    arguments it was rendered with: "tools" (TOOLS offered or not),
    "thinking" (the switch, null: the family's default), "reasoning_effort".
    `released` renders the family's released template, which the text must
    equal but for the tools section (DeepSeek-V3.1)."""
    out = []
    plain_cases = {c[0]: c for c in conversations(texts)}
    renders = []  # (name, messages, gen, tools, thinking, effort)
    what = TOOL_CASES.get(name)
    for cname, msgs, gen, with_tools in tool_conversations() if what else []:
        has_calls = any(m.get("tool_calls") for m in msgs)
        if has_calls and not what["calls"]:
            continue
        if what.get("one_call") and any(len(m.get("tool_calls", [])) > 1 for m in msgs):
            continue
        if with_tools and not what["tools"]:
            if not has_calls:
                continue
            with_tools = False
            cname += "_tools_not_offered"
        renders.append((cname, msgs, gen, with_tools, None, None))
    if name in THINKING:
        for on in (True, False):
            for cname in ("one_turn", "several_turns", "ends_with_assistant"):
                _, msgs, gen = plain_cases[cname]
                renders.append(("%s_thinking_%s" % (cname, "on" if on else "off"), msgs, gen, False, on,
                             None))
            if what and what["calls"]:
                for cname, msgs, gen, with_tools in tool_conversations():
                    if cname == "next_turn_after_results":
                        renders.append(("%s_thinking_%s" % (cname, "on" if on else "off"), msgs, gen,
                                     with_tools and what["tools"], on, None))
    if name == "gpt-oss":
        for effort in ("low", "medium", "high"):
            _, msgs, gen = plain_cases["system_one_turn"]
            renders.append(("system_one_turn_effort_" + effort, msgs, gen, False, None, effort))
    for cname, msgs, gen, with_tools, thinking, effort in renders:
        kw = {}
        if with_tools:
            kw["tools"] = TOOLS
        if thinking is not None:
            kw[THINKING[name]] = thinking
        if effort is not None:
            kw["reasoning_effort"] = effort
        rendered = msgs
        if name in ("glm45", "gpt-oss", "deepseek-v3.1", "qwen3.5"):
            # GLM's template iterates arguments.items(), harmony's and vLLM's
            # DeepSeek-V3.1 one print arguments|tojson (a JSON string literal,
            # were they a string): a serving stack (vLLM) hands them the
            # parsed object. GLM prints its values as tojson(ensure_ascii=False),
            # strings bare; tojson of the parsed DeepSeek arguments is the text
            # CALL_* hold (json.dumps), which the released template prints.
            rendered = [{**m, "tool_calls": [
                {**c, "function": {**c["function"],
                                   "arguments": json.loads(c["function"]["arguments"])}}
                for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in msgs]
        if name == "gpt-oss":
            # Harmony's template names an assistant's reasoning "thinking".
            rendered = [{**{k: v for k, v in m.items() if k != "reasoning_content"},
                         "thinking": m["reasoning_content"]} if "reasoning_content" in m else m
                        for m in rendered]
        shown = None
        if name == "glm45":
            def shown(m):
                return m["content"].strip() if m["role"] == "assistant" else m["content"]
        if name == "qwen3.5":  # its template strips every text
            def shown(m):
                return m["content"].strip()
        if name == "gpt-oss":
            def shown(m):
                # Harmony prints a tool result as content|tojson: the quotes
                # around the protected text are the template's own.
                return json.dumps(m["content"], ensure_ascii=False)[1:-1] if m["role"] == "tool" \
                    else m["content"]
        text, ids = protected_ids(render, plain, specials, rendered, gen, shown, **kw)
        assert not any(s in m["content"] for m in msgs for s in specials), cname
        naive = whole(rendered, gen, **kw)
        assert ids == naive, (name, cname, ids, naive)
        if released:
            only_tools_differ(released(msgs, gen, **{k: v for k, v in kw.items() if k != "tools"}),
                              text, cname)
        out.append({"name": cname, "messages": msgs, "add_generation_prompt": gen,
                    "tools": with_tools, "thinking": thinking, "reasoning_effort": effort,
                    "text": text, "ids": ids})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deepseek-v31-tools", metavar="TEMPLATE",
                    help="vLLM's examples/tool_chat_template_deepseekv31.jinja")
    ap.add_argument("--only", metavar="FAMILY",
                    help="write this family's entry alone, the others' kept as committed")
    args = ap.parse_args()
    ds31_tools_template = None
    if args.only in (None, "deepseek-v3.1"):
        if not args.deepseek_v31_tools:
            ap.error("--deepseek-v31-tools is needed for deepseek-v3.1")
        with open(args.deepseek_v31_tools, encoding="utf-8") as f:
            ds31_tools_template = without_layout(f.read())
    families = {}
    with open(os.path.join(ROOT, "models", "demo-moe", "tokenizer_config.json")) as f:
        demo_template = json.load(f)["chat_template"]
    with open(os.path.join(OUT, "deepseek-v3.jinja")) as f:
        ds_template = f.read()
    with open(os.path.join(OUT, "deepseek-v3.1.jinja")) as f:
        ds31_template = f.read()
    setups = {
        "demo": (hf_family("demo", os.path.join(ROOT, "models", "demo-moe"), demo_template),
                 "models/demo-moe/tokenizer.json", "models/demo-moe/tokenizer_config.json",
                 [DS_USER, DS_EOS]),
        "deepseek": (hf_family("deepseek", os.path.join(ROOT, "tests", "fixtures", "tokenizer",
                                                        "deepseek"), ds_template),
                     "tests/fixtures/tokenizer/deepseek/tokenizer.json",
                     "tests/fixtures/chat/deepseek-v3.jinja", [DS_USER, DS_EOS]),
        "deepseek-v3.1": (hf_family("deepseek-v3.1", os.path.join(ROOT, "tests", "fixtures",
                                                                  "tokenizer", "deepseek"),
                                    ds31_template),
                          "tests/fixtures/tokenizer/deepseek/tokenizer.json",
                          "tests/fixtures/chat/deepseek-v3.1.jinja", [DS_USER, DS_EOS]),
    }
    fx_tok = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
    for name, tdir, tmpl, texts, kwargs in [
            ("qwen3", "qwen3", "qwen3.jinja", ["<|im_start|>", "<|im_end|>"], {"enable_thinking": False}),
            ("qwen3.5", "qwen3", "qwen3.6.jinja", ["<|im_start|>", "<|im_end|>"],
             {"enable_thinking": False}),
            ("glm45", "glm45", "glm-4.6.jinja", ["<|user|>", "<|assistant|>"], {"enable_thinking": False}),
            ("gpt-oss", "gpt-oss", "gpt-oss.jinja", ["<|start|>", "<|end|>"], {})]:
        with open(os.path.join(OUT, tmpl)) as f:
            template = f.read()
        setups[name] = (hf_family(name, os.path.join(fx_tok, tdir), template, **kwargs),
                        "tests/fixtures/tokenizer/%s/tokenizer.json" % tdir,
                        "tests/fixtures/chat/" + tmpl, texts)
    k = kimi_family()
    setups["kimi"] = (k[:5], "tests/fixtures/tokenizer/tokenizer.model",
                      "tests/fixtures/chat/kimi-k2.jinja", ["<|im_end|>", "<|im_user|>"])
    if args.only:
        setups = {args.only: setups[args.only]}
    for name, ((render, plain, whole, specials, bos), tok_path, tmpl_path, texts) in setups.items():
        cases = []
        for cname, msgs, gen in conversations(texts):
            shown = None
            if name == "glm45":  # its template writes content.strip() of an assistant message
                def shown(m):
                    return m["content"].strip() if m["role"] == "assistant" else m["content"]
            if name == "qwen3.5":  # and Qwen3.5's every text stripped
                def shown(m):
                    return m["content"].strip()
            try:
                text, ids = protected_ids(render, plain, specials, msgs, gen, shown)
            except jinja2.exceptions.TemplateError as e:
                # What the template raises on, the engine refuses.
                cases.append({"name": cname, "messages": msgs, "add_generation_prompt": gen,
                              "refused": str(e)})
                continue
            naive = whole(msgs, gen)
            has_special = any(s in m["content"] for m in msgs for s in specials)
            if has_special:
                assert ids != naive, (name, cname)
            else:
                assert ids == naive, (name, cname, ids, naive)
            cases.append({"name": cname, "messages": msgs, "add_generation_prompt": gen,
                          "text": text, "ids": ids, "content_has_special_text": has_special})
        agent, released = (render, plain, whole), None
        if name == "deepseek-v3.1":  # the tools need vLLM's template; the released one checks it
            ds_dir = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "deepseek")
            agent, released = hf_family(name, ds_dir, ds31_tools_template)[:3], render
        families[name] = {"tokenizer": tok_path, "template": tmpl_path, "bos_token": bos,
                          "cases": cases, "agent_cases": agent_cases(name, *agent, specials, texts,
                                                                     released)}
        if name == "gpt-oss":
            families[name]["date"] = DATE
        if name in ("qwen3", "qwen3.5", "glm45"):
            families[name]["enable_thinking"] = False
        print(f"{name}: {len(cases)} cases, {sum(len(c.get('ids', [])) for c in cases)} ids, "
              f"{len(families[name]['agent_cases'])} agent cases")
    if args.only:
        with open(os.path.join(OUT, "chat.json"), encoding="utf-8") as f:
            kept = json.load(f)
        kept["families"].update(families)
        families = kept["families"]
    doc = {"generator": "tools/chat/make_fixtures.py",
           "tools": TOOLS,
           "transformers_version": transformers.__version__,
           "tiktoken_version": tiktoken.__version__,
           "families": families}
    with open(os.path.join(OUT, "chat.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
