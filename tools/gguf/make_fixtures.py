#!/usr/bin/env python3
"""Fixtures for engine/gguf and engine/kernels/gguf_dequant: the `gguf`
package (PyPI, llama.cpp's own Python reader and writer) is the oracle.

  pip install gguf==0.19.0 numpy
  python3 tools/gguf/make_fixtures.py tests/fixtures/gguf

Writes, for each quant type waste dequantizes, `quants/<type>.bin`:
  u32 ggml type, u32 block_size, u32 type_size, u32 n_blocks   (the package's GGML_QUANT_SIZES)
  n_blocks * type_size bytes of blocks
  n_blocks * block_size float32: gguf.quants.dequantize of those blocks
Half the blocks come from gguf.quants.quantize of random floats where the
package quantizes that type, the rest are random bytes whose f16 scales are
replaced by random finite halves (the package cannot quantize the K and IQ
types; random bytes reach every code).

And `tiny.gguf`, a small file written by gguf.GGUFWriter with metadata of
every value type and tensors of several types, with `tiny.json`: its
metadata and each tensor's name, shape, type and dequantized values as the
package's GGUFReader reads them back.
"""
import json
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

# Byte offsets of each type's f16 scale fields inside a block.
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2],
    T.Q6_K: [208], T.IQ4_NL: [0], T.IQ4_XS: [0], T.MXFP4: [],
}
# The 1-3 bit IQ types: random bytes only (the package cannot quantize
# them), from their own generator so that the files above stay as they were.
IQ_HALF_FIELDS = {T.IQ2_XXS: [0], T.IQ3_XXS: [0], T.IQ3_S: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ1_S: [0],
                  T.IQ1_M: []}
QUANTIZABLE = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4}
FLOATS = [T.F32, T.F16, T.BF16]


def random_blocks(rng, qtype, n):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    if qtype in FLOATS:
        x = (rng.standard_normal(n * block) * 3).astype(np.float32)
        return quantize(x, qtype).view(np.uint8).reshape(n, size)
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for off in {**HALF_FIELDS, **IQ_HALF_FIELDS}[qtype]:
        h = (rng.standard_normal(n) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(n, 2)
    if qtype == T.IQ1_M:  # its f16 d is the top nibbles of the four u16 scales at 48
        h = (rng.standard_normal(n) * 0.05).astype(np.float16).view(np.uint16)
        scales = raw[:, 48:56].copy().view(np.uint16)
        for i in range(4):
            scales[:, i] = (scales[:, i] & 0x0FFF) | (((h >> (4 * i)) & 0xF) << 12)
        raw[:, 48:56] = scales.view(np.uint8)
    if qtype in QUANTIZABLE:
        half = n // 2
        x = (rng.standard_normal(half * block) * rng.uniform(0.01, 4)).astype(np.float32)
        raw[:half] = quantize(x.reshape(half, block), qtype).reshape(half, size)
    return raw


def write_quants(out, rng, qtypes):
    os.makedirs(os.path.join(out, "quants"), exist_ok=True)
    for qtype in qtypes:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        n = 8 if block == 256 else 32
        blocks = random_blocks(rng, qtype, n)
        values = dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == n * block
        with open(os.path.join(out, "quants", qtype.name.lower() + ".bin"), "wb") as f:
            f.write(struct.pack("<4I", int(qtype), block, size, n))
            f.write(blocks.tobytes())
            f.write(values.tobytes())


def write_tiny(out, rng):
    path = os.path.join(out, "tiny.gguf")
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_name("tiny-moe")
    w.add_context_length(4096)
    w.add_expert_count(8)
    w.add_expert_used_count(2)
    w.add_block_count(2)
    w.add_tokenizer_model("gpt2")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.15625)
    w.add_bool("test.bool", True)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", -1.0e100)
    w.add_array("test.strings", ["a", "bc", "", "déf"])
    w.add_array("test.ints", [1, -2, 3])
    w.add_token_list(["<s>", "hello", " world", "\u2581x"])
    tensors = [
        ("token_embd.weight", (4, 64), T.F32),
        ("blk.0.attn_q.weight", (2, 64), T.F16),
        ("blk.0.ffn_gate_exps.weight", (2, 256), T.Q4_K),
        ("blk.0.ffn_down_exps.weight", (3, 64), T.Q8_0),
        ("blk.1.ffn_up_exps.weight", (2, 256), T.Q6_K),
        ("output_norm.weight", (64,), T.BF16),
    ]
    made = []
    for name, shape, qtype in tensors:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        rows = int(np.prod(shape[:-1]))
        data = random_blocks(rng, qtype, rows * shape[-1] // block)
        data = data.view(np.float32 if qtype == T.F32 else np.float16).reshape(shape) \
            if qtype in (T.F32, T.F16) else data.reshape(*shape[:-1], shape[-1] // block * size)
        w.add_tensor(name, data, raw_shape=shape if qtype in (T.F32, T.F16) else None, raw_dtype=qtype)
        made.append((name, shape, qtype, dequantize(data, qtype).astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # What the package's own reader makes of the file.
    r = gguf.GGUFReader(path)
    info = {"tensors": [], "data_offset": int(r.data_offset)}
    by_name = {t.name: t for t in r.tensors}
    for name, shape, qtype, values in made:
        t = by_name[name]
        assert t.tensor_type == qtype
        read = dequantize(t.data, qtype).astype(np.float32).reshape(-1)
        assert np.array_equal(read.view(np.uint32), values.reshape(-1).view(np.uint32))
        info["tensors"].append({
            "name": name, "type": int(qtype), "dims": [int(d) for d in t.shape],
            "offset": int(t.data_offset - r.data_offset), "bytes": int(t.n_bytes),
            "values": [float(v) for v in read],
        })
    info["tensors_count"] = len(r.tensors)
    info["kv_count"] = len(r.fields) - 3  # GGUF.version, tensor_count, kv_count
    with open(os.path.join(out, "tiny.json"), "w") as f:
        json.dump(info, f, indent=1)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/gguf"
    rng = np.random.default_rng(44)
    write_quants(out, rng, FLOATS + list(HALF_FIELDS))
    write_tiny(out, rng)
    write_quants(out, np.random.default_rng(4402), list(IQ_HALF_FIELDS))


if __name__ == "__main__":
    main()
