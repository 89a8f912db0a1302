"""The oracle of tests/tokenizer_json_test.cc, written by
`make_fixtures.py --oracle [--deepseek PATH/tokenizer.json]` (pip install
tokenizers tiktoken regex): a mixed corpus, and the ids Hugging Face
tokenizers gives for it with DeepSeek's released tokenizer.json and the demo
model's, and tiktoken with the Kimi fixture; every pre-tokenizer step's
pre_tokenize_str; a tokenizer.json whose merge order is not its id order.

Invalid UTF-8 inputs are stored as hex; their expected ids are those of
bytes.decode("utf-8", errors="replace"), which is how the engine repairs
them (tokenizers and tiktoken take str and never see the bytes).
"""

import base64
import json
import os
import random
import shutil

import tiktoken
import tokenizers
def oracle_corpus(rng, blocks, emoji):
    """About 200 mixed strings: every script above, emoji with ZWJ and skin
    tones, whitespace runs, tabs, newlines and CRLF, digit and punctuation
    runs, code; then random mixes of the same fragments."""
    lines = []
    for block in blocks:
        lines += [l for l in block.split("\n") if l]
    lines += [
        "", " ", "  ", "\t", "\n", "\r\n", "\r\n\r\n", " \n ", "a  b   c    d", "end   ",
        "   start", "tab\there\t\tand\t\t\tthere", "line one\nline two\r\nline three\rfour",
        "\n\n\nthree newlines", "spaces before newline   \n   after", "\u00a0nbsp\u00a0and\u3000ideographic",
        "\u2028line sep\u2029para sep", "\x0bvertical\x0cform feed", "x" + " " * 40 + "y",
        "0", "12", "123", "1234", "1234567890", "3.14159265358979", "1,000,000.00", "-42", "+7e-10",
        "٠١٢٣٤٥٦٧٨٩", "१२३४५", "１２３４５", "²³¹", "Ⅻ ⅷ", "version 2.0.1-rc3", "2026-12-01T19:15:00Z",
        "!!!", "???!!!...", "...", "—–-", "«guillemets»", "「括弧」『二重』", "(((nested)))", "#$%&*@^~`|\\",
        "a!b?c.d,e;f:g", "Hello!!! World???", "\"'\"'", "::->>=<<=", "/* comment */ // line",
        "don't DON'T Don'T we'll WE'LL I'd I'M you're YOU'RE it's IT'S", "'s 't 're 've 'm 'll 'd",
        "’s curly apostrophe’s", "ſ long s's", "e\u0301 combining, \u00e9 precomposed",
        "Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307lgo", "\u200bzero\u200dwidth\u200c",
        "\ufeffBOM first", "\u202eRTL override\u202c", "ﬁ ligature ﬂ", "Ａｂｃ fullwidth",
        "x²+y²=z²", "∑∫∂√∞≠≤≥", "€100 £50 ¥1000 ₹200 ₿1", "°C ±5% ‰", "→ ← ↑ ↓ ⇒ ⇔",
        "▁▁underscore▁blocks", "Ġspaces spelled Ġ", "<｜not a special｜>", "<|im_end|> as text",
        "日本語とEnglishのmix123です", "中文English混合ABC中文", "한국어와English", "Русский and English",
        "مرحبا hello שלום", "हिन्दी and English", "ภาษาไทยกับEnglish",
        "def f(x):\n\treturn x ** 2\n", "if (a && b || !c) { x += 1; }\r\n", "{\"key\": [1, 2, 3], \"v\": null}",
        "    indented four\n        eight", "#!/bin/sh\nset -eu\necho \"$HOME\"", "SELECT * FROM t WHERE x<>1;",
        "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
        "0x7fff_ffff 0b1010 0o777", "λx.x (λy.y)", "i++; --j; k **= 2;",
    ]
    lines += emoji
    lines += ["👨‍👩‍👧‍👦👨‍👩‍👧‍👦 family twice", "👍🏻👍🏼👍🏽👍🏾👍🏿 tones", "🏳️‍🌈🏳️‍⚧️ flags", "🇯🇵🇺🇸🇫🇷",
              "emoji😀in😂text", "❤️‍🔥 heart on fire", "🧑🏽‍🤝‍🧑🏿 people", "1️⃣2️⃣3️⃣ keycaps"]
    fragments = [l for l in lines if l.strip()]
    seps = ["", " ", "  ", "\n", "\t", "\r\n", " \n", "   "]
    while len(lines) < 200:
        k = rng.randint(2, 4)
        parts = [rng.choice(fragments) for _ in range(k)]
        out = parts[0]
        for p in parts[1:]:
            out += rng.choice(seps) + p
        lines.append(out)
    return lines


# Invalid UTF-8 (hex): lone continuation bytes, truncated sequences, overlong
# forms, surrogates, bytes above U+10FFFF, in and around text.
ORACLE_INVALID = [
    "80", "bf", "c0af", "e282", "e28241", "eda080", "f4908080", "f5", "ff", "fe",
    "4865ff6c6c6f", "e4b8ade69687e4b8", "2020ff2020", "f09f9880f09f98", "c3", "61c362",
    "e0808061", "0a80200a", "31323380343536", "f0908080f09f9880",
]


# Pre-tokenizer steps, one configuration at a time, with what tokenizers'
# pre_tokenize_str gives (ByteLevel's alphabet mapped back to the text).
ORACLE_STEPS = [
    [{"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": b, "invert": inv}]
    for b in ("Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous")
    for inv in (False, True)
] + [
    [{"type": "Split", "pattern": {"String": "ab"}, "behavior": b, "invert": False}]
    for b in ("Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous")
] + [
    [{"type": "Digits", "individual_digits": True}],
    [{"type": "Digits", "individual_digits": False}],
    [{"type": "Punctuation", "behavior": "Isolated"}],
    [{"type": "Punctuation", "behavior": "MergedWithPrevious"}],
    [{"type": "Punctuation", "behavior": "Contiguous"}],
    [{"type": "ByteLevel", "add_prefix_space": False, "use_regex": True, "trim_offsets": True}],
    [{"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
     {"type": "Punctuation", "behavior": "Isolated"},
     {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True, "trim_offsets": True}],
    [{"type": "Split", "pattern": {"Regex": r"[\w]+|\W"}, "behavior": "Isolated", "invert": False}],
    [{"type": "Split", "pattern": {"Regex": r"^ +|x{,2}y"}, "behavior": "Isolated", "invert": False}],
]

ORACLE_STEP_TEXTS = [
    "a  b   c", "  lead and trail  ", "ab abab cab ba aab", "x123 4567 89!", "Hello, world!!! (ok?)",
    "$5+3=8 ^_^ a|b ~x", "3.14—2,5…٣٤", "don't stop 'til you've 12345 ¡hola!",
    "line\n  next\r\n\tend", "日本語123テスト。", "xxy xxxy y\n  z", "_under_score ＡＢ１２",
]


def unbyte(piece):
    table = {c: b for b, c in bytes_to_unicode().items()}
    return bytes(table[ch] for ch in piece).decode("utf-8")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def oracle_steps():
    out = []
    for steps in ORACLE_STEPS:
        doc = {"type": "Sequence", "pretokenizers": steps}
        full = {"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []},
                "pre_tokenizer": doc}
        tk = tokenizers.Tokenizer.from_str(json.dumps(full))
        byte_level = steps[-1]["type"] == "ByteLevel"
        for t in ORACLE_STEP_TEXTS:
            pieces = [p for p, _ in tk.pre_tokenizer.pre_tokenize_str(t)]
            if byte_level:
                pieces = [unbyte(p) for p in pieces]
            out.append({"steps": steps, "text": t, "pieces": pieces})
    return out


def oracle_reordered():
    """A small tokenizer.json whose merge order is not its id order, and
    where merging by the rank of the concatenation (tiktoken's way) gives
    other ids than tokenizers' pairs: with its ids for a few texts."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    for t in ["ab", "bc", "abc", "cd", "bcd", "Ġa", "Ġab"]:
        vocab[t] = len(vocab)
    merges = ["c d", "a b", "b c", "b cd", "ab c", "Ġ a", "Ġa b"]
    doc = {"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": False},
           "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False,
                                               "trim_offsets": True, "use_regex": False},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                     "ignore_merges": False, "vocab": vocab, "merges": merges}}
    tk = tokenizers.Tokenizer.from_str(json.dumps(doc))
    texts = ["abcd", "abc", "bcd", "xabcdx", "ab cd", " abcd", "aabbccdd", "abcabcd"]
    return {"tokenizer": doc, "texts": texts,
            "ids": [tk.encode(t, add_special_tokens=False).ids for t in texts]}


def oracle_ids(texts, encode):
    return [encode(t) for t in texts]


def build_oracle(out, deepseek_json, blocks, emoji, pat_str):
    """Writes oracle/corpus.json and, per tokenizer, oracle/<name>.json with
    the reference ids of every corpus string and every invalid input
    (decoded with errors="replace", as the engine repairs it)."""
    rng = random.Random(20261201)
    corpus = oracle_corpus(rng, blocks, emoji)
    odir = os.path.join(out, "oracle")
    os.makedirs(odir, exist_ok=True)
    invalid_texts = [bytes.fromhex(h).decode("utf-8", errors="replace") for h in ORACLE_INVALID]
    with open(os.path.join(odir, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/tokenizer/make_fixtures.py --oracle",
                   "texts": corpus, "invalid_utf8_hex": ORACLE_INVALID}, f, ensure_ascii=False, indent=0)
        f.write("\n")

    with open(os.path.join(odir, "steps.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/tokenizer/make_fixtures.py --oracle",
                   "reference": f"tokenizers {tokenizers.__version__}: pre_tokenize_str",
                   "cases": oracle_steps()}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")

    with open(os.path.join(odir, "reordered.json"), "w", encoding="utf-8") as f:
        json.dump(oracle_reordered(), f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")

    here = os.path.dirname(os.path.abspath(__file__))
    ds_dir = os.path.join(out, "deepseek")
    os.makedirs(ds_dir, exist_ok=True)
    if deepseek_json:
        shutil.copyfile(deepseek_json, os.path.join(ds_dir, "tokenizer.json"))
        cfg = os.path.join(os.path.dirname(deepseek_json), "tokenizer_config.json")
        if os.path.exists(cfg):
            shutil.copyfile(cfg, os.path.join(ds_dir, "tokenizer_config.json"))
    sources = {
        "deepseek": os.path.join(ds_dir, "tokenizer.json"),
        "demo-moe": os.path.join(here, "..", "..", "models", "demo-moe", "tokenizer.json"),
    }
    for name, path in sources.items():
        tk = tokenizers.Tokenizer.from_file(path)
        enc = lambda t: tk.encode(t, add_special_tokens=False).ids
        doc = {"generator": "tools/tokenizer/make_fixtures.py --oracle",
               "reference": f"tokenizers {tokenizers.__version__}: encode(text, add_special_tokens=False)",
               "ids": oracle_ids(corpus, enc), "invalid_ids": oracle_ids(invalid_texts, enc)}
        with open(os.path.join(odir, name + ".json"), "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        for t, ids in zip(corpus, doc["ids"]):
            assert tk.decode(ids, skip_special_tokens=False) == t, (name, t)
    # Kimi's: tiktoken with the committed fixture vocabulary and pat_str.
    ranks = {}
    with open(os.path.join(out, "tokenizer.model")) as f:
        for line in f:
            if line.strip():
                b64, r = line.split()
                ranks[base64.b64decode(b64)] = int(r)
    enc = tiktoken.Encoding(name="kimi-fixture", pat_str=pat_str, mergeable_ranks=ranks, special_tokens={})
    doc = {"generator": "tools/tokenizer/make_fixtures.py --oracle",
           "reference": f"tiktoken {tiktoken.__version__}: encode_ordinary(text)",
           "ids": oracle_ids(corpus, enc.encode_ordinary),
           "invalid_ids": oracle_ids(invalid_texts, enc.encode_ordinary)}
    with open(os.path.join(odir, "kimi.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"oracle: {len(corpus)} texts, {len(ORACLE_INVALID)} invalid inputs in {odir}")
