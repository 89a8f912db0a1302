#!/usr/bin/env python3
"""Writes the tokenizer fixtures of Qwen3, GPT-OSS and GLM-4.5
(tests/fixtures/tokenizer/{qwen3,gpt-oss,glm45}/ and oracle/{name}.json).

    /work/pyenv/bin/python tools/tokenizer/make_families.py   (tokenizers 0.23.3)

The released vocabularies are not committed (tests/fixtures/tokenizer/README.md
says which could be had offline and why): each family's tokenizer.json here is
a small byte-level BPE trained with `tokenizers` on this repo's text, with the
family's released normalizer, pre-tokenizer and added tokens (in their
released order, numbered after the 3,000 ranks as tokenizers numbers them;
the released ids are the ranks' count plus the same index), so the engine's pipeline for that family is what is checked:

  qwen3    NFC normalizer; Split on Qwen2's pattern (single digits), Isolated;
           ByteLevel without its regex; <|endoftext|> 151643 .. </think> 151668
           (the <tool_call> .. </think> ones not special), as Qwen3's release.
  gpt-oss  no normalizer; Split on o200k_base's pattern, Isolated; ByteLevel;
           o200k_harmony's specials: <|startoftext|> 199998 .. <|reserved_201087|>
           (201,088 ids), as openai-harmony 0.0.8 names them.
  glm45    no normalizer; Split on GLM-4's pattern (digits in threes), Isolated;
           ByteLevel; <|endoftext|> 151329 .. (GLM-4.5's specials).

oracle/{name}.json holds tokenizers' ids, as content (the normalizer,
pre-tokenizer and model: encode(text, add_special_tokens=False) where the text
holds no added token's text, which is asserted), of every corpus string (oracle/corpus.json) and invalid input (its
"replace" decoding), and of a few texts that normalization changes
("extra_texts": decomposed accents, Hangul jamo, singletons, composition
exclusions, mark reordering).
"""
import glob
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
FX = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
VOCAB = 3000

QWEN2_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
             r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
O200K_PAT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
GLM4_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
            r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

QWEN3_SPECIALS = [(151643 + i, t, i < 14 or 16 <= i <= 21) for i, t in enumerate([
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"])]
HARMONY_NAMED = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>",
                 200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>",
                 200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>",
                 200018: "<|endofprompt|>"}
HARMONY_SPECIALS = [(i, HARMONY_NAMED.get(i, "<|reserved_%d|>" % i), True) for i in range(199998, 201088)]
GLM45_SPECIALS = [(151329 + i, t, True) for i, t in enumerate([
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
    "<|begin_of_video|>", "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>",
    "<|begin_of_transcription|>", "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>",
    "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
    "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink",
    "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>"])]

FAMILIES = {
    "qwen3": (QWEN2_PAT, True, QWEN3_SPECIALS, "<|endoftext|>", "<|im_end|>"),
    "gpt-oss": (O200K_PAT, False, HARMONY_SPECIALS, "<|startoftext|>", "<|return|>"),
    "glm45": (GLM4_PAT, False, GLM45_SPECIALS, None, "<|endoftext|>"),
}

# Texts that NFC changes, or that sit at its edges.
EXTRA_TEXTS = [
    "cafe\u0301 re\u0301sume\u0301", "A\u030a and \u212b and \u00c5", "\u1100\u1161\u11a8 \u1100\u1161",
    "\uac00\u11a8 \ud55c\uad6d\uc5b4", "a\u0323\u0307 a\u0307\u0323 \u1e0b\u0323", "\u0958 \u0915\u093c",
    "\u2126 ohm, \u212a kelvin", "e\u0301\u0301\u0301 o\u0308\u0304", "\u0344 \u0340\u0341",
    "n\u0303o\u0303 \u00f1", "\u304b\u3099 \u30cf\u309a", "x\u0334\u0301y", "\u0f73 \u0f75 \u0f81",
    "\u00e9t\u00e9 \u00c9T\u00c9", "Hello\u0301, world\u0308!", "\ufb01 \ufb02 no compat",
]


def training_text():
    texts = json.load(open(os.path.join(FX, "oracle", "corpus.json"), encoding="utf-8"))["texts"]
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")) +
                       glob.glob(os.path.join(ROOT, "engine", "*", "README.md"))):
        texts.append(open(path, encoding="utf-8").read())
    return texts + EXTRA_TEXTS


def build(pattern, nfc, specials):
    tok = Tokenizer(models.BPE(ignore_merges=False))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    doc = json.loads(tok.to_str())
    # tokenizers numbers added tokens that are not in the vocabulary right
    # after it, in their order, whatever ids the file gives: so do the
    # released files (151,643 + i for Qwen, 151,329 + i for GLM, 199,998 + i
    # for o200k_harmony), and so the added tokens here follow the 3,000 ranks.
    base = len(doc["model"]["vocab"])
    doc["added_tokens"] = [{"id": base + k, "content": t, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": special}
                           for k, (_, t, special) in enumerate(specials)]
    return Tokenizer.from_str(json.dumps(doc)), doc


def main():
    corpus = json.load(open(os.path.join(FX, "oracle", "corpus.json"), encoding="utf-8"))
    for name, (pattern, nfc, specials, bos, eos) in FAMILIES.items():
        tok, doc = build(pattern, nfc, specials)
        out = os.path.join(FX, name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False,
               "add_eos_token": False, "clean_up_tokenization_spaces": False,
               "bos_token": bos, "eos_token": eos, "model_max_length": 131072}
        with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)
            f.write("\n")

        def enc(s):
            # Content: the normalizer, pre-tokenizer and model alone (no added
            # token matched, as the engine's Encode); where the text holds no
            # added token's text this is encode() itself, which is asserted.
            norm = tok.normalizer.normalize_str(s) if tok.normalizer else s
            plain = [t.id for piece, _ in tok.pre_tokenizer.pre_tokenize_str(norm)
                     for t in tok.model.tokenize(piece)]
            if not any(t in s for _, t, _ in specials):
                assert plain == tok.encode(s, add_special_tokens=False).ids, s
            return plain

        ids = [enc(t) for t in corpus["texts"]]
        invalid = [enc(bytes.fromhex(h).decode("utf-8", "replace")) for h in corpus["invalid_utf8_hex"]]
        extra = [enc(t) for t in EXTRA_TEXTS]
        oracle = {"generator": "tools/tokenizer/make_families.py",
                  "reference": "tokenizers 0.23.3: normalizer, pre_tokenize_str and model.tokenize (= encode(text, add_special_tokens=False) without added-token text)",
                  "ids": ids, "invalid_ids": invalid, "extra_texts": EXTRA_TEXTS, "extra_ids": extra}
        with open(os.path.join(FX, "oracle", name + ".json"), "w", encoding="utf-8") as f:
            json.dump(oracle, f, ensure_ascii=False, separators=(",", ":"))
        print(name, len(doc["model"]["vocab"]), "ranks,", len(specials), "added;",
              sum(map(len, ids)), "corpus ids")


if __name__ == "__main__":
    main()
