#!/usr/bin/env python3
"""Checks of the container reader (container.py), with no forward pass.

    python3 tools/reference/selftest.py --waste build/bin/waste [--work /tmp/waste-reference-selftest]

1. The decoders against the format description itself (nibble order, the
   3-bit bit stream, VQ4P packing, half floats), with encoders written here
   from the same text.
2. Sizes and counts against `waste info --json` for the presets and the
   expert-format / trunk-bits variants.
3. The decoded values against the values `waste synth` generated: its
   generator (xoshiro256** and the per-tensor / per-expert seeding, described
   in docs/DESIGN.md) is re-implemented here, so every trunk format written
   by synth is checked to within its quantization step, and every expert
   record (blocked index layout, all three matrices, the row scales, the
   codebooks) exactly.
4. Q3G, F16 and BF16, which synth does not write: a container is re-encoded
   here with some tensors in those formats, `waste info` must accept it,
   and the reader must give the values back.

Exit status 0 when everything passes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import container as C  # noqa: E402

M64 = (1 << 64) - 1
FAILS: list[str] = []


def check(cond: bool, what: str):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


# ------------------------------------------------- 1. decoders vs the spec ---

def encode_q3_row(codes: np.ndarray) -> bytes:
    """codes in -4..3; stored +4, code i at bits [3i, 3i+3), LSB first, plus a guard byte."""
    n = len(codes)
    out = bytearray((n * 3 + 7) // 8 + 1)
    for i, q in enumerate(codes):
        u = int(q) + 4
        for b in range(3):
            if u >> b & 1:
                bit = 3 * i + b
                out[bit // 8] |= 1 << (bit % 8)
    return bytes(out)


def spec_tests():
    rng = np.random.default_rng(0)
    # Q4G: low nibble first, +8 bias.
    q = C.decode_q4(np.array([[0x9A, 0x0F]], np.uint8), 4)
    check(q.tolist() == [[2, 1, 7, -8]], "Q4G nibble order: 0x9A 0x0F -> [2, 1, 7, -8]")
    # Q3G bit stream.
    codes = rng.integers(-4, 4, size=(5, 256))
    rows = np.frombuffer(b"".join(encode_q3_row(r) for r in codes), np.uint8).reshape(5, -1)
    check(rows.shape[1] == C.grouped_row_bytes(3, 256, 128), "Q3G row bytes = (padded*3+7)/8 + 1")
    check(np.array_equal(C.decode_q3(rows, 256), codes), "Q3G decode of a spec-encoded bit stream")
    first = C.decode_q3(np.frombuffer(encode_q3_row(np.array([3, -4, 1, 0, -1, 2, -3, 3])) + b"\0" * 10,
                                      np.uint8)[None, :], 8)
    check(first.tolist() == [[3, -4, 1, 0, -1, 2, -3, 3]], "Q3G worked example")
    # VQ4P: byte0 = s0 | s1<<6, byte1 = s1>>2 | s2<<4, byte2 = s2>>4 | s3<<2.
    s = rng.integers(0, 64, size=(10000, 4))
    b = np.stack([(s[:, 0] | (s[:, 1] << 6)) & 255, ((s[:, 1] >> 2) | (s[:, 2] << 4)) & 255,
                  ((s[:, 2] >> 4) | (s[:, 3] << 2)) & 255], -1).astype(np.uint8)
    check(np.array_equal(C.unpack_vq4(b), s), "VQ4P unpack inverts the spec's packing")
    # Half floats.
    check(C.f16_to_f32(np.array([0x3C00, 0xC000, 0x7BFF, 0x0001], np.uint16)).tolist()
          == [1.0, -2.0, 65504.0, 2.0 ** -24], "f16 known values")
    check(C.bf16_to_f32(np.array([0x3F80, 0x4049, 0xC2F7], np.uint16)).tolist()
          == [1.0, 3.140625, -123.5], "bf16 known values")


# ------------------------------------------------- 2. against waste info ---

def info_tests(waste: str, path: str, label: str):
    info = json.loads(subprocess.run([waste, "info", "--json", path], capture_output=True, text=True,
                                     check=True).stdout)
    c = C.Container(path)
    lay = c.record_layout()
    ex = info["experts"]
    check(lay["record_bytes"] == ex["record_bytes"], f"{label}: record bytes {lay['record_bytes']}")
    check(lay["record_bytes"] * c.n_experts * len(c.layers) == ex["bank_bytes"],
          f"{label}: bytes of all banks")
    fmts = {}
    trunk_params = 0
    for e in c.manifest["trunk"]:
        name = C.TRUNK_FMT_NAMES[e["fmt"]]
        if e["fmt"] == C.F16 and e.get("dtype") == "bf16":
            name = "BF16"
        f = fmts.setdefault(name, {"bytes": 0, "tensors": 0})
        f["tensors"] += 1
        f["bytes"] += int(e["bytes"])
        trunk_params += int(np.prod(e["shape"]))
    check(fmts == info["trunk_formats"], f"{label}: trunk formats {fmts}")
    emb = c.trunk_entries[c.prefix + "model.embed_tokens.weight"]
    check(int(emb["bytes"]) == info["embedding_bytes_on_disk"], f"{label}: embedding bytes on disk")
    n_moe = len(c.layers)
    per_expert = 3 * c.hidden * c.moe_inter
    check(trunk_params + per_expert * c.n_experts * n_moe == info["params_total"], f"{label}: params_total")
    bpw = c.bytes_per_vector * 8 / c.vec_dim
    check(abs(bpw - ex["bits_per_weight"]) < 1e-9, f"{label}: bits per weight {bpw}")
    # every tensor and every record decodes (records: header, offsets and crc32 checked)
    for e in c.manifest["trunk"]:
        v = c.tensor(e["name"][len(c.prefix):])
        assert np.isfinite(v).all(), e["name"]
    for L in c.layers:
        for x in range(c.n_experts):
            c.record(L, x, check_crc=True)
    check(True, f"{label}: all {len(c.manifest['trunk'])} tensors and {n_moe * c.n_experts} records "
                f"decode (headers, offsets, crc32)")


# ------------------------------------------------- 3. synth's own values ---

class Rng:
    """xoshiro256** seeded through splitmix64, as engine/synth/synth.cc."""

    def __init__(self, seed: int):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self) -> int:
        s = self.s
        r = (self.rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self.rotl(s[3], 45)
        return r

    def uniform(self, lo, hi) -> np.float32:
        lo, hi = np.float32(lo), np.float32(hi)
        return lo + (hi - lo) * np.float32(self.next() >> 40) * np.float32(1.0 / 16777216.0)

    def normal(self) -> np.float32:
        s = np.float32(0)
        for _ in range(12):
            s = s + self.uniform(0, 1)
        return s - np.float32(6)


def mix(seed: int, what: str, a: int = 0, b: int = 0) -> int:
    h = 1469598103934665603 ^ seed
    for ch in what.encode():
        h = ((h ^ ch) * 1099511628211) & M64
    h = ((h ^ a) * 1099511628211) & M64
    h = ((h ^ b) * 1099511628211) & M64
    return h


def synth_rows(name: str, cols: int, rows: range, seed: int, bias_scale: float) -> np.ndarray:
    if name.endswith("norm.weight"):
        kind, lo, hi = "u", 0.9, 1.1
    elif name.endswith("conv1d.weight"):
        kind, lo, hi = "u", -0.5, 0.5
    elif name.endswith("A_log"):
        kind, lo, hi = "log", 1.0, 16.0
    elif name.endswith("dt_bias"):
        kind, lo, hi = "u", -1.0, 1.0
    elif name.endswith("e_score_correction_bias"):
        kind, lo, hi = "n", 0, 0
    elif name.endswith("embed_tokens.weight"):
        kind, lo, hi = "u", -1.0, 1.0
    else:
        gain = np.float32(0.5 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0)
        hi = gain * np.sqrt(np.float32(3) / np.float32(cols), dtype=np.float32)
        kind, lo = "u", -hi
    s0 = mix(seed, name)
    out = np.empty((len(rows), cols), np.float32)
    for i, r in enumerate(rows):
        g = Rng(s0 ^ ((0x9E3779B97F4A7C15 * (r + 1)) & M64))
        for j in range(cols):
            if kind == "u":
                out[i, j] = g.uniform(lo, hi)
            elif kind == "log":
                out[i, j] = np.log(g.uniform(lo, hi))
            else:
                out[i, j] = np.float32(bias_scale) * g.normal()
    return out


def synth_value_tests(path: str, label: str, seed: int = 1, bias_scale: float = 0.1):
    c = C.Container(path)
    worst_rel = {}
    for e in c.manifest["trunk"]:
        name = e["name"]
        shape = e["shape"]
        cols = shape[-1]
        nrows = int(np.prod(shape)) // cols
        take = range(min(nrows, 6))
        want = synth_rows(name, cols, take, seed, bias_scale)
        got = c.tensor(name).reshape(nrows, cols)[: len(take)]
        fmt = C.TRUNK_FMT_NAMES[e["fmt"]]
        if e["fmt"] == C.F32:
            ok = np.allclose(got, want, rtol=1e-6, atol=1e-7)
            err = float(np.abs(got - want).max())
        else:
            # Symmetric grouped quantization: |error| <= half a step, step = the group's scale,
            # and scale = max|x| / qmax rounded to f16.
            qmax = {C.Q8G: 127, C.Q4G: 7, C.Q3G: 3}[e["fmt"]]
            g = int(e["group"])
            ng = -(-cols // g)
            pad = np.zeros((len(take), ng * g), np.float32)
            pad[:, :cols] = want
            amax = np.abs(pad.reshape(len(take), ng, g)).max(-1)
            step = (amax / qmax).astype(np.float16).astype(np.float32)
            errs = np.abs(got - want).reshape(len(take), -1)
            lim = np.repeat(step, g, axis=1)[:, :cols] * 0.5 * (1 + 1e-3) + 1e-7
            ok = bool((errs <= lim).all())
            err = float((errs / np.maximum(lim, 1e-30)).max())
        worst_rel[fmt] = max(worst_rel.get(fmt, 0.0), err)
        if not ok:
            check(False, f"{label}: {name} ({fmt}) differs from synth's values (worst {err:.3g})")
    check(True, f"{label}: trunk tensors match synth's generator (worst: "
                + ", ".join(f"{k} {v:.3g}{' abs' if k == 'F32' else ' of half a step'}"
                            for k, v in sorted(worst_rel.items())) + ")")

    # Codebooks, as synth draws them per layer: stage s of each matrix in +-2^-s, then f16.
    per = c.entries * c.vec_dim
    for L, meta in sorted(c.layers.items()):
        g = Rng(mix(seed, "codebooks", L))
        base = int(meta["codebook_base"])
        for b in range(3 * c.stages):
            amp = np.float32(0.5) ** np.float32(b % c.stages)
            vals = np.array([g.uniform(-amp, amp) for _ in range(per)], np.float32)
            want = vals.astype(np.float16).astype(np.float32).reshape(c.entries, c.vec_dim)
            if not np.array_equal(c.codebooks[base + b], want):
                check(False, f"{label}: codebook {base + b} (layer {L}) differs")
    check(True, f"{label}: all codebooks match synth's generator exactly")

    # Expert records: regenerate the index bytes in write order (blocked), the
    # scales, and the full weight from those, and compare with the reader.
    lay = c.record_layout()
    bpv = c.bytes_per_vector
    n_checked = 0
    for L in sorted(c.layers):
        for x in sorted({0, 5 % c.n_experts, c.n_experts - 1}):
            g = Rng(mix(seed, "expert", L, x))
            raw = []
            for m in range(3):
                rows, cols = lay["rows"][m], lay["cols"][m]
                nvec = cols // c.vec_dim
                block = c.index_block or rows
                arr = np.zeros((-(-rows // block) * block, nvec, bpv), np.uint8)
                for b0 in range(0, rows, block):
                    valid = min(block, rows - b0)
                    for v in range(nvec):
                        n = valid * bpv
                        buf = bytearray()
                        for i in range(0, n, 8):
                            buf += g.next().to_bytes(8, "little")[: min(8, n - i)]
                        a = np.frombuffer(bytes(buf), np.uint8).reshape(valid, bpv)
                        if c.index_bits == 8 and c.entries < 256:
                            a = a % c.entries
                        arr[b0:b0 + valid, v] = a
                raw.append(arr[:rows])
            scales = []
            for m in range(3):
                rows, cols = lay["rows"][m], lay["cols"][m]
                gain = np.float32(0.5 if m == 2 else 1.0)
                a = gain * np.sqrt(np.float32(3) / np.float32(cols), dtype=np.float32)
                sc = np.array([a * g.uniform(0.8, 1.2) for _ in range(rows)], np.float32)
                scales.append(sc.astype(np.float16).astype(np.float32))
            got = c.expert(L, x)
            cb = int(c.layers[L]["codebook_base"])
            for m, name in enumerate(C.MATRICES):
                idx = C.unpack_vq4(raw[m]) if c.index_bits == 6 else raw[m].astype(np.int64)
                if not np.array_equal(c.expert_indices(L, x, m), idx):
                    check(False, f"{label}: layer {L} expert {x} {name}: indices differ")
                acc = np.zeros(idx.shape[:2] + (c.vec_dim,), np.float32)
                for s in range(c.stages):
                    acc += c.codebooks[cb + m * c.stages + s][idx[:, :, s]]
                want = acc.reshape(idx.shape[0], -1) * scales[m][:, None]
                if not np.array_equal(got[name], want):
                    check(False, f"{label}: layer {L} expert {x} {name}: weights differ "
                                 f"(max {np.abs(got[name] - want).max():.3g})")
            n_checked += 1
    check(True, f"{label}: {n_checked} expert records match synth's generator exactly "
                f"(blocked indices, codebooks, row scales)")


# ------------------------------------- 4. formats synth does not write ---

def encode_grouped(x: np.ndarray, bits: int, group: int) -> tuple[bytes, bytes]:
    rows, cols = x.shape
    ng = -(-cols // group)
    pad = np.zeros((rows, ng * group), np.float32)
    pad[:, :cols] = x
    qmax = {8: 127, 4: 7, 3: 3}[bits]
    amax = np.abs(pad.reshape(rows, ng, group)).max(-1)
    scale = (amax / qmax).astype(np.float16)
    s32 = scale.astype(np.float32)
    q = np.where(s32[:, :, None] > 0, np.rint(pad.reshape(rows, ng, group) / np.where(s32 > 0, s32, 1)[:, :, None]), 0)
    q = np.clip(q, -qmax - 1, qmax).astype(np.int32).reshape(rows, -1)
    if bits == 3:
        payload = b"".join(encode_q3_row(r) for r in q)
    elif bits == 4:
        u = (q + 8).astype(np.uint8)
        payload = (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8).tobytes()
    else:
        payload = q.astype(np.int8).tobytes()
    return payload, scale.astype("<f2").tobytes()


def reencode_tests(waste: str, src: str, dst: str):
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    man = json.load(open(os.path.join(dst, "manifest.json")))
    trunk = bytearray(open(os.path.join(dst, "trunk.bin"), "rb").read())
    c = C.Container(src)
    plan = {}  # name -> (format, original values)
    mats = [e for e in man["trunk"] if e["fmt"] in (C.Q4G, C.Q8G) and "embed" not in e["name"]]
    for e, kind in zip(mats[:6], ["q3", "f16", "bf16", "q3", "f16", "bf16"]):
        plan[e["name"]] = kind
    originals = {}
    for e in man["trunk"]:
        kind = plan.get(e["name"])
        if not kind:
            continue
        x = c.tensor(e["name"]).reshape(-1, e["shape"][-1])
        originals[e["name"]] = x
        while len(trunk) % 64:
            trunk.append(0)
        e["off"] = len(trunk)
        e.pop("dtype", None)
        if kind == "q3":
            payload, scales = encode_grouped(x, 3, 128)
            trunk += payload
            e["scale_off"] = len(trunk)
            trunk += scales
            e["fmt"], e["group"], e["bytes"] = C.Q3G, 128, len(payload) + len(scales)
        else:
            if kind == "f16":
                payload = x.astype("<f2").tobytes()
            else:  # bf16 by truncation (exact for our check: we compare against the same rounding)
                payload = (x.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
                e["dtype"] = "bf16"
            trunk += payload
            e["fmt"], e["bytes"] = C.F16, len(payload)
            e.pop("scale_off", None)
            e.pop("group", None)
    open(os.path.join(dst, "trunk.bin"), "wb").write(trunk)
    json.dump(man, open(os.path.join(dst, "manifest.json"), "w"), indent=1)
    r = subprocess.run([waste, "info", "--json", dst], capture_output=True, text=True)
    check(r.returncode == 0, f"re-encoded container (Q3G, F16, BF16 tensors) accepted by waste info "
                             f"{'' if r.returncode == 0 else r.stderr.strip()}")
    if r.returncode == 0:
        tf = json.loads(r.stdout)["trunk_formats"]
        check("Q3G" in tf and ("F16" in tf or "BF16" in tf), f"waste info counts them: {sorted(tf)}")
    d = C.Container(dst)
    for name, kind in plan.items():
        x = originals[name]
        got = d.tensor(name).reshape(x.shape)
        if kind == "f16":
            ok = np.array_equal(got, x.astype(np.float16).astype(np.float32))
        elif kind == "bf16":
            ok = np.array_equal(got, ((x.view(np.uint32) >> 16) << 16).view(np.float32))
        else:
            ng = -(-x.shape[1] // 128)
            pad = np.zeros((x.shape[0], ng * 128), np.float32)
            pad[:, :x.shape[1]] = x
            step = (np.abs(pad.reshape(x.shape[0], ng, 128)).max(-1) / 3).astype(np.float16).astype(np.float32)
            lim = np.repeat(step, 128, axis=1)[:, :x.shape[1]]
            # 3 bits saturate at +3 steps: the positive extreme may lose up to one step
            ok = bool((np.abs(got - x) <= lim * (1 + 1e-3) + 1e-7).all())
        check(ok, f"re-encoded {name.split('model.')[-1]} as {kind.upper()} decodes back")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--waste", required=True)
    ap.add_argument("--work", default="/tmp/waste-reference-selftest")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    spec_tests()
    variants = [
        ("tiny-kimi", []),
        ("tiny-deepseek", []),
        ("tiny-kimi", ["--expert-format", "vq4p"]),
        ("tiny-deepseek", ["--expert-format", "vq2r", "--trunk-bits", "8"]),
    ]
    for preset, extra in variants:
        label = preset + ("" if not extra else " " + " ".join(extra))
        path = os.path.join(args.work, label.replace(" ", "_").replace("--", ""))
        subprocess.run([args.waste, "synth", "--force", "--preset", preset, *extra, path],
                       check=True, capture_output=True)
        info_tests(args.waste, path, label)
        synth_value_tests(path, label)
    reencode_tests(args.waste, os.path.join(args.work, "tiny-kimi"), os.path.join(args.work, "reencoded"))
    print(f"\n{len(FAILS)} failure(s)" if FAILS else "\nall checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
