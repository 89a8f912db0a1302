#!/usr/bin/env python3
"""A GGUF of Qwen3-30B-A3B's shapes with random weights, for llama.cpp's
`qwen3moe` architecture: the other side of issue 21's decode comparison
(`waste synth --preset qwen3-30b-a3b` is waste's side).

Matrices are Q4_0 (a block of 32 weights: an fp16 scale d, then 16 bytes of
4-bit codes q, the weight (q - 8) * d), with codes drawn uniformly from 1..15
so their mean is zero, and d chosen so that a product over the fan-in keeps
unit variance. Norms and the router are F32, as llama-quantize leaves them.
The vocabulary is GPT-2's 256 byte tokens and numbered fillers: llama-bench
never tokenizes text, it only needs the table's size.

Tensor and key names are llama.cpp's (src/*-arch.cpp, the qwen3moe case of
*-model.cpp): blk.L.attn_{q,k,v,output}, attn_{q,k}_norm, ffn_gate_inp,
ffn_{gate,up,down}_exps. gguf-py (PyPI `gguf`) writes the file, tensor by
tensor, so memory stays small.

  synth_qwen3moe_gguf.py --out q30.gguf                   # the released shapes, ~17 GB
  synth_qwen3moe_gguf.py --layers 2 --experts 8 --out t.gguf   # a quick check
"""
import argparse

import numpy as np
import gguf

# Qwen/Qwen3-30B-A3B's config.json.
SHAPE = dict(hidden=2048, layers=48, heads=32, kv_heads=4, head_dim=128, experts=128, top_k=8,
             moe_inter=768, vocab=151936, rope_theta=1e6, rms_eps=1e-6, context=40960)

Q4_0_BLOCK = 32
Q4_0_BYTES = 18
# Standard deviation of (q - 8) for q uniform in 1..15.
CODE_STD = ((15 * 15 - 1) / 12) ** 0.5


class Q4Source:
    """Q4_0 rows of random codes: one random pool, read at a moving offset, so
    that writing 17 GB does not cost 17 GB of random numbers."""

    def __init__(self, seed=0, pool_blocks=1 << 21):
        rng = np.random.default_rng(seed)
        lo = rng.integers(1, 16, size=(pool_blocks, 16), dtype=np.uint8)
        hi = rng.integers(1, 16, size=(pool_blocks, 16), dtype=np.uint8)
        self.codes = lo | (hi << 4)
        self.at = 0

    def blocks(self, n, fan_in):
        d = np.full((n, 1), 1.0 / (fan_in ** 0.5 * CODE_STD), dtype=np.float16).view(np.uint8)
        out = np.empty((n, Q4_0_BYTES), dtype=np.uint8)
        out[:, :2] = d
        done = 0
        while done < n:
            take = min(n - done, len(self.codes) - self.at)
            out[done:done + take, 2:] = self.codes[self.at:self.at + take]
            done += take
            self.at = (self.at + take) % len(self.codes)
        return out


def tensors(s):
    """(name, numpy shape: outermost first, kind, fan_in) for every tensor."""
    H, hd = s["hidden"], s["head_dim"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    E, F = s["experts"], s["moe_inter"]
    yield "token_embd.weight", (s["vocab"], H), "q4", 1
    for L in range(s["layers"]):
        b = f"blk.{L}."
        yield b + "attn_norm.weight", (H,), "ones", 0
        yield b + "attn_q.weight", (q, H), "q4", H
        yield b + "attn_k.weight", (kv, H), "q4", H
        yield b + "attn_v.weight", (kv, H), "q4", H
        yield b + "attn_output.weight", (H, q), "q4", q
        yield b + "attn_q_norm.weight", (hd,), "ones", 0
        yield b + "attn_k_norm.weight", (hd,), "ones", 0
        yield b + "ffn_norm.weight", (H,), "ones", 0
        yield b + "ffn_gate_inp.weight", (E, H), "router", H
        yield b + "ffn_gate_exps.weight", (E, F, H), "q4", H
        yield b + "ffn_up_exps.weight", (E, F, H), "q4", H
        yield b + "ffn_down_exps.weight", (E, H, F), "q4", F
    yield "output_norm.weight", (H,), "ones", 0
    yield "output.weight", (s["vocab"], H), "q4", H


def vocabulary(n):
    """GPT-2's byte tokens (its printable map of the 256 bytes), then fillers."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    tokens = [chars[b] for b in range(256)]
    tokens += [f"<|filler_{i}|>" for i in range(n - len(tokens) - 2)]
    tokens += ["<|endoftext|>", "<|im_end|>"]
    types = [gguf.TokenType.NORMAL] * (n - 2) + [gguf.TokenType.CONTROL] * 2
    merges = [f"{chars[ord('t')]} {chars[ord('h')]}"]
    return tokens, types, merges


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--layers", type=int, default=SHAPE["layers"])
    p.add_argument("--experts", type=int, default=SHAPE["experts"])
    a = p.parse_args()
    s = dict(SHAPE, layers=a.layers, experts=a.experts)

    w = gguf.GGUFWriter(a.out, "qwen3moe")
    w.add_name("synthetic Qwen3-30B-A3B shapes (random weights)")
    w.add_context_length(s["context"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(6144)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(s["rms_eps"])
    w.add_expert_count(s["experts"])
    w.add_expert_used_count(s["top_k"])
    w.add_expert_feed_forward_length(s["moe_inter"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    tokens, types, merges = vocabulary(s["vocab"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(s["vocab"] - 2)
    w.add_bos_token_id(s["vocab"] - 2)
    w.add_add_bos_token(False)

    plan = list(tensors(s))
    for name, shape, kind, _ in plan:
        if kind == "q4":
            byte_shape = (*shape[:-1], shape[-1] // Q4_0_BLOCK * Q4_0_BYTES)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8),
                              int(np.prod(byte_shape)), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    q4 = Q4Source()
    rng = np.random.default_rng(1)
    for name, shape, kind, fan_in in plan:
        if kind == "q4":
            rows = int(np.prod(shape[:-1]))
            data = q4.blocks(rows * (shape[-1] // Q4_0_BLOCK), fan_in)
        elif kind == "ones":
            data = np.ones(shape, dtype=np.float32)
        else:
            data = (rng.standard_normal(shape) / fan_in ** 0.5).astype(np.float32)
        w.write_tensor_data(data.reshape(-1))
    w.close()


if __name__ == "__main__":
    main()
