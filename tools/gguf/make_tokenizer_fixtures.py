#!/usr/bin/env python3
"""Fixtures for engine/tokenizer/gguf_tokenizer: tiny GGUFs carrying the
tokenizer metadata of the tokenizers in tests/fixtures/tokenizer/, written as
llama.cpp's convert_hf_to_gguf.py writes them, and the ids `tokenizers`
gives for texts with special tokens in them.

  pip install gguf==0.19.0 tokenizers==0.23.3 transformers tiktoken regex numpy
  python3 tools/gguf/make_tokenizer_fixtures.py tests/fixtures/gguf/tokenizer

For each family (qwen3, glm45, gpt-oss, deepseek), `<family>.gguf`:
- tokenizer.ggml.tokens and token_type as the converter's get_vocab_base
  makes them from transformers' AutoTokenizer (ids 0..vocab_size-1; an id
  the tokenizer lacks is "[PAD<id>]", UNUSED; an added token is CONTROL when
  special or when it looks special (<|...|>, <｜...｜>), else USER_DEFINED,
  its text as the tokenizer decodes it when it is not normalized; the rest
  NORMAL, in GPT-2's byte-level alphabet);
- tokenizer.ggml.model "gpt2" and tokenizer.ggml.pre the name the
  converter's get_vocab_base_pre gives the released tokenizer of the family
  (qwen2, glm4, gpt-4o, deepseek-v3: the fixtures are trained stand-ins, so
  their hash is not the released one and the name is set here);
- merges, the special ids and add_bos/add_eos by the package's SpecialVocab
  (what _set_vocab_gpt2 calls), GLM's ids overridden as the converter's GLM
  set_vocab does; tokenizer.chat_template: the family's released template
  from tests/fixtures/chat/;
- one tiny F32 tensor (a GGUF without tensors is not a model).

vocab_size: DeepSeek-V3's config (129280); the 3,000-rank stand-ins get 8
ids more than their tokenizer, so that UNUSED padding ids are present as in
the released files (Qwen3's 151936 over 151669 tokens).

`kimi.gguf`: the Kimi fixture (tests/fixtures/tokenizer/tokenizer.model
and specials.json, tiktoken's), as the converter's Kimi K2 branch writes a
tiktoken vocabulary: each rank's bytes in the byte-level alphabet at its
id, the merges rebuilt from the ranks (its QwenModel.bpe: a token's bytes
merged by rank below its own until two parts are left), the specials
CONTROL, ids past them "[PAD<id>]" UNUSED, pre "kimi-k2"; the oracle is
tiktoken with Kimi's pat_str (encode(text, allowed_special="all")).

And tests/fuzz/gguf/seed-tokenizer, a small GGUF with every tokenizer key
(fuzz/gguf_fuzz.cc's seed).

And `<family>.json`: the metadata as the package's GGUFReader reads it back
(bos/eos/eot/pad ids, add_bos, the counts), and `markup`: texts holding
special tokens with `tokenizers`' encode(text, add_special_tokens=False)
ids (its added tokens matched in the text, as llama.cpp's parse_special
does). The content corpus is tests/fixtures/tokenizer/oracle/, reused.
"""
import json
import os
import sys

import base64

import numpy as np
import gguf
import tiktoken
from tokenizers import Tokenizer
from transformers import AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOK = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
CHAT = os.path.join(ROOT, "tests", "fixtures", "chat")

# family: (pre name, general.architecture, chat template file, vocab_size or None)
FAMILIES = {
    "qwen3": ("qwen2", "qwen3moe", "qwen3.jinja", None),
    "glm45": ("glm4", "glm4moe", "glm-4.6.jinja", None),
    "gpt-oss": ("gpt-4o", "gpt-oss", "gpt-oss.jinja", None),
    "deepseek": ("deepseek-v3", "deepseek2", "deepseek-v3.jinja", 129280),
}
EXPECTED_CHAT = {"qwen3": "qwen3", "glm45": "glm-4.5", "gpt-oss": "harmony", "deepseek": "deepseek-v3"}


def looks_special(t):
    # convert_hf_to_gguf.py's does_token_look_special
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<｜") and t.endswith("｜>")) or (t.startswith("<unused") and t.endswith(">")))


def vocab_base(tokenizer, vocab_size):
    # convert_hf_to_gguf.py's get_vocab_base
    reverse_vocab = {i: t for t, i in tokenizer.vocab.items()}
    added_vocab = tokenizer.get_added_vocab()
    decoder = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse_vocab:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        token = reverse_vocab[i]
        if token in added_vocab:
            if not decoder[i].normalized:
                token = tokenizer.decode(tokenizer.encode(token, add_special_tokens=False))
            if decoder[i].special or looks_special(token):
                types.append(gguf.TokenType.CONTROL)
            else:
                token = token.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(token)
    return tokens, types


def byte_level(b):
    # GPT-2's bytes_to_unicode, applied to a token's bytes
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for x in range(256):
        if x not in bs:
            bs.append(x)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return "".join(chr(table[x]) for x in b)


def bpe_parts(ranks, token, max_rank):
    # the converter's QwenModel.bpe
    parts = [bytes([x]) for x in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[1]):
                best = (i, r)
        if best is None:
            return parts
        i = best[0]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def write_kimi(out_dir, corpus):
    sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))
    from make_fixtures import PAT_STR  # Kimi's pat_str, verbatim
    ranks = {}
    for line in open(os.path.join(TOK, "tokenizer.model")):
        b64, r = line.split()
        ranks[base64.b64decode(b64)] = int(r)
    specials = {e["text"]: e["id"] for e in json.load(open(os.path.join(TOK, "specials.json")))}
    merges = []
    for token, rank in ranks.items():
        if len(token) > 1:
            parts = bpe_parts(ranks, token, rank)
            if len(parts) == 2:
                merges.append(byte_level(parts[0]) + " " + byte_level(parts[1]))
    reverse = {r: byte_level(t) for t, r in ranks.items()}
    reverse.update({i: t for t, i in specials.items()})
    vocab_size = max(reverse) + 1 + 8
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(reverse[i])
            types.append(gguf.TokenType.CONTROL if i in specials.values() else gguf.TokenType.NORMAL)
    path = os.path.join(out_dir, "kimi.gguf")
    w = gguf.GGUFWriter(path, "deepseek2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("kimi-k2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_chat_template(open(os.path.join(CHAT, "kimi-k2.jinja")).read())
    write_tensor_and_close(w)
    enc = tiktoken.Encoding(name="kimi-fixture", pat_str=PAT_STR, mergeable_ranks=ranks,
                            special_tokens=specials)
    names = list(specials)
    texts = markup_texts(corpus, names)
    doc = {
        "generator": "tools/gguf/make_tokenizer_fixtures.py",
        "reference": f"tiktoken {tiktoken.__version__} encode(text, allowed_special=\"all\")",
        "pre": "kimi-k2", "chat_family": "kimi-k2", "n_tokens": len(tokens),
        "n_unused": 8, "n_specials": len(specials), "n_merges": len(merges),
        "bos": None, "eos": None, "eot": None, "pad": None, "add_bos": None,
        "markup": texts,
        "markup_ids": [enc.encode(t, allowed_special="all") for t in texts],
    }
    with open(os.path.join(out_dir, "kimi.json"), "w") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
    print("kimi", os.path.getsize(path), "bytes,", len(tokens), "tokens,", len(merges), "merges")


def write_tensor_and_close(w):
    w.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_fuzz_seed(path):
    # A few hundred bytes of tokenizer metadata for fuzz/gguf_fuzz.cc: the 256
    # byte tokens, two merges, two controls, one unused id, ChatML's markers.
    tokens = [byte_level(bytes([b])) for b in range(256)] + ["ab", "abc", "<|im_start|>", "<|im_end|>", "[PAD260]"]
    types = [gguf.TokenType.NORMAL] * 258 + [gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.UNUSED]
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["a b", "ab c"])
    w.add_eos_token_id(259)
    w.add_chat_template("<|im_start|>{{ m.content }}<|im_end|>")
    write_tensor_and_close(w)


def markup_texts(corpus, specials):
    out = [specials[0], specials[0] + specials[-1], "x" + specials[1] + "y"]
    for k in range(12):
        a, b = corpus[(7 * k) % len(corpus)], corpus[(7 * k + 3) % len(corpus)]
        s1, s2 = specials[k % len(specials)], specials[(3 * k + 1) % len(specials)]
        out.append(a[:60] + s1 + b[:60] + s2 + "\n")
    return out


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    corpus = json.load(open(os.path.join(TOK, "oracle", "corpus.json")))["texts"]
    for family, (pre, arch, chat_file, vocab_size) in FAMILIES.items():
        src = os.path.join(TOK, family)
        auto = AutoTokenizer.from_pretrained(src)
        vocab_size = vocab_size or len(auto.vocab) + 8
        assert max(auto.vocab.values()) < vocab_size
        tokens, types = vocab_base(auto, vocab_size)

        path = os.path.join(out_dir, family + ".gguf")
        w = gguf.GGUFWriter(path, arch)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        special = gguf.SpecialVocab(src, load_merges=True, n_vocab=len(tokens))
        if family == "glm45":
            added = auto.get_added_vocab()
            for kind, text in (("eos", "<|endoftext|>"), ("eot", "<|user|>"), ("unk", "<|endoftext|>"),
                               ("bos", "<|endoftext|>")):
                special._set_special_token(kind, added[text])
        special.chat_template = open(os.path.join(CHAT, chat_file)).read()
        special.add_to_gguf(w)
        write_tensor_and_close(w)

        r = gguf.GGUFReader(path)

        def field(key):
            f = r.fields.get(key)
            return None if f is None else f.contents()

        assert field("tokenizer.ggml.tokens") == tokens
        ref = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
        specials = [t for t, ty in zip(tokens, types) if ty in (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED)]
        texts = markup_texts(corpus, specials)
        doc = {
            "generator": "tools/gguf/make_tokenizer_fixtures.py",
            "reference": "gguf 0.19.0 GGUFReader; "
                         "tokenizers 0.23.3 encode(text, add_special_tokens=False)",
            "pre": pre,
            "chat_family": EXPECTED_CHAT[family],
            "n_tokens": len(tokens),
            "n_unused": sum(1 for t in types if t == gguf.TokenType.UNUSED),
            "n_specials": len(specials),
            "n_merges": len(field("tokenizer.ggml.merges") or []),
            "bos": field("tokenizer.ggml.bos_token_id"),
            "eos": field("tokenizer.ggml.eos_token_id"),
            "eot": field("tokenizer.ggml.eot_token_id"),
            "pad": field("tokenizer.ggml.padding_token_id"),
            "add_bos": field("tokenizer.ggml.add_bos_token"),
            "markup": texts,
            "markup_ids": [ref.encode(t, add_special_tokens=False).ids for t in texts],
        }
        with open(os.path.join(out_dir, family + ".json"), "w") as f:
            json.dump(doc, f, ensure_ascii=False, indent=0)
        print(family, os.path.getsize(path), "bytes,", len(tokens), "tokens,", doc["n_merges"], "merges")
    write_kimi(out_dir, corpus)
    write_fuzz_seed(os.path.join(ROOT, "tests", "fuzz", "gguf", "seed-tokenizer"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "gguf", "tokenizer"))
