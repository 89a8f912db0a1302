"""A reader for the WARP v0 container, written from the format description.

This is the reference side of the correctness tests: it is deliberately
independent of the C++ reader (engine/format/) and follows only the format
as documented (docs/FORMAT.md here, and WARP's docs/FORMAT.md). Everything
is dequantized to float32 exactly: a quantized value times its f16 scale is
exact in float32, and an expert weight is the f16 row scale times the sum of
the f16 codebook entries of its stages, summed in float32 in stage order.

    c = Container("/tmp/ref/tiny-kimi")
    w = c.tensor("model.layers.0.self_attn.q_proj.weight")   # np.float32 [rows, cols]
    e = c.expert(1, 7)                                        # {"gate","up","down"} np.float32

Only numpy and the standard library are needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib

import numpy as np

FORMAT_VERSION = 0
ALIGN = 4096
EXPERT_MAGIC = 0x50584557  # "WEXP"
CODEBOOK_MAGIC = 0x4B424357  # "WCBK"
EXPERT_HEADER = struct.Struct("<IHHBBHHHIIIIIIII")  # 48 bytes
CODEBOOK_HEADER = struct.Struct("<IHBBII")  # 16 bytes
assert EXPERT_HEADER.size == 48 and CODEBOOK_HEADER.size == 16

# Trunk formats.
F32, F16, Q8G, Q4G, Q3G = 0, 1, 2, 3, 7
TRUNK_FMT_NAMES = {F32: "F32", F16: "F16", Q8G: "Q8G", Q4G: "Q4G", Q3G: "Q3G"}
# Expert formats.
VQ3R, VQ2R, VQ4P = 4, 5, 8
BF16R = 9  # this project's extension: each matrix stored whole as bfloat16, no scales
EXPERT_FMT_NAMES = {VQ3R: "VQ3R", VQ2R: "VQ2R", VQ4P: "VQ4P", BF16R: "BF16R"}
MATRICES = ("gate", "up", "down")  # record order, matrix index 0, 1, 2


class FormatError(ValueError):
    pass


# ----------------------------------------------------------------- scalars ---

def f16_to_f32(raw: np.ndarray) -> np.ndarray:
    """Little-endian IEEE half floats (as uint16 or bytes) to float32."""
    return np.asarray(raw).view("<f2").astype(np.float32)


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32."""
    u = np.asarray(raw).view("<u2").astype(np.uint32) << 16
    return u.view("<f4").astype(np.float32)


def grouped_row_bytes(bits: int, cols: int, group: int) -> int:
    """Payload bytes of one group-quantized row: rows are padded to whole
    groups; 3-bit rows carry one guard byte after the packed codes."""
    padded = -(-cols // group) * group
    if bits == 8:
        return padded
    if bits == 4:
        return padded // 2
    if bits == 3:
        return (padded * 3 + 7) // 8 + 1
    raise FormatError(f"no grouped format with {bits} bits")


def decode_q8(rows_bytes: np.ndarray, padded: int) -> np.ndarray:
    """[rows, padded] int8 codes."""
    return rows_bytes.view(np.int8)[:, :padded].astype(np.int32)


def decode_q4(rows_bytes: np.ndarray, padded: int) -> np.ndarray:
    """Two codes per byte, low nibble first, each stored with a +8 bias."""
    b = rows_bytes.astype(np.int32)
    q = np.empty((b.shape[0], b.shape[1] * 2), np.int32)
    q[:, 0::2] = (b & 0x0F) - 8
    q[:, 1::2] = (b >> 4) - 8
    return q[:, :padded]


def decode_q3(rows_bytes: np.ndarray, padded: int) -> np.ndarray:
    """3-bit codes, LSB-first: code i occupies bits [3i, 3i + 3) of the row,
    read as a little-endian bit stream, stored with a +4 bias."""
    b = rows_bytes.astype(np.uint32)
    i = np.arange(padded)
    bit = 3 * i
    lo = b[:, bit >> 3]
    hi = b[:, (bit >> 3) + 1]  # the guard byte keeps this inside the row
    v = ((lo | (hi << 8)) >> (bit & 7)) & 7
    return v.astype(np.int32) - 4


def unpack_vq4(b: np.ndarray) -> np.ndarray:
    """VQ4P: [..., 3] bytes -> [..., 4] six-bit stage indices, stage 0 lowest."""
    b = b.astype(np.int64)
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    s0 = b0 & 63
    s1 = (b0 >> 6) | ((b1 & 15) << 2)
    s2 = (b1 >> 4) | ((b2 & 3) << 4)
    s3 = b2 >> 2
    return np.stack([s0, s1, s2, s3], axis=-1)


# -------------------------------------------------------------- container ---

class Container:
    def __init__(self, path: str):
        self.path = path
        with open(os.path.join(path, "manifest.json"), "rb") as f:
            self.manifest_bytes = f.read()
        m = json.loads(self.manifest_bytes)
        self.manifest = m
        if m.get("format_version") != FORMAT_VERSION:
            raise FormatError(f"manifest.json: format_version {m.get('format_version')!r}, not 0")
        self.config = m["config"]
        self.prefix = m.get("tensor_prefix", "") or ""
        q = m["expert_quant"]
        self.stages = int(q["stages"])
        self.vec_dim = int(q["vec_dim"])
        self.entries = int(q["entries"])
        self.index_block = int(q.get("index_block", 0) or 0)
        self.index_bits = int(q.get("index_bits", 8) or 8)
        if self.vec_dim != 8:
            raise FormatError("expert_quant.vec_dim must be 8")
        if q.get("fmt") == "BF16R":
            if (self.stages, self.entries, self.index_block, self.index_bits) != (0, 0, 0, 16):
                raise FormatError("BF16R needs stages 0, entries 0, index_block 0, index_bits 16")
            self.bytes_per_vector = 2 * self.vec_dim
            self.expert_fmt = BF16R
        elif self.index_bits == 6:
            if self.stages != 4 or self.entries != 64:
                raise FormatError("6-bit indices are VQ4P: 4 stages of 64 entries")
            self.bytes_per_vector = 3
            self.expert_fmt = VQ4P
        elif self.index_bits == 8:
            self.bytes_per_vector = self.stages
            self.expert_fmt = {3: VQ3R, 2: VQ2R}.get(self.stages, VQ3R)
        else:
            raise FormatError(f"expert_quant.index_bits {self.index_bits}")

        self._trunk_path = os.path.join(path, "trunk.bin")
        self._trunk = np.fromfile(self._trunk_path, dtype=np.uint8)
        self.trunk_entries = {e["name"]: e for e in m["trunk"]}
        if len(self.trunk_entries) != len(m["trunk"]):
            raise FormatError("manifest.json: duplicate trunk tensor names")
        self._load_codebooks()
        self.layers = {int(k): v for k, v in m["layers"].items()}
        self._banks: dict[int, np.ndarray] = {}

    # ---- config helpers
    def cfg(self, *keys, default=None):
        for k in keys:
            if k in self.config and self.config[k] is not None:
                return self.config[k]
        return default

    @property
    def hidden(self) -> int:
        return int(self.config["hidden_size"])

    @property
    def expert_in(self) -> int:
        """The width the routed experts read and write: K3's latent
        (routed_expert_hidden_size), else the hidden size."""
        return int(self.cfg("routed_expert_hidden_size", default=self.hidden))

    @property
    def moe_inter(self) -> int:
        return int(self.config["moe_intermediate_size"])

    @property
    def n_experts(self) -> int:
        return int(self.cfg("num_experts", "n_routed_experts"))

    # ---- trunk
    def has(self, name: str) -> bool:
        return self.prefix + name in self.trunk_entries

    def tensor(self, name: str) -> np.ndarray:
        """A trunk tensor by its name (without tensor_prefix), as float32."""
        e = self.trunk_entries[self.prefix + name]
        shape = [int(d) for d in e["shape"]]
        n = int(np.prod(shape))
        fmt, off = int(e["fmt"]), int(e["off"])
        blob = self._trunk
        if fmt == F32:
            return blob[off:off + 4 * n].view("<f4").astype(np.float32).reshape(shape)
        if fmt == F16:
            raw = blob[off:off + 2 * n]
            if e.get("dtype") == "bf16":
                return bf16_to_f32(raw).reshape(shape)
            return f16_to_f32(raw).reshape(shape)
        bits = {Q8G: 8, Q4G: 4, Q3G: 3}.get(fmt)
        if bits is None:
            raise FormatError(f"{e['name']}: fmt {fmt} is not a trunk format")
        cols = shape[-1]
        rows = n // cols
        group = int(e.get("group", 128))
        ngroups = -(-cols // group)
        padded = ngroups * group
        rb = grouped_row_bytes(bits, cols, group)
        payload = blob[off:off + rows * rb]
        if payload.size != rows * rb:
            raise FormatError(f"{e['name']}: payload runs past trunk.bin")
        payload = payload.reshape(rows, rb)
        q = {8: decode_q8, 4: decode_q4, 3: decode_q3}[bits](payload, padded)
        so = int(e["scale_off"])
        scales = f16_to_f32(blob[so:so + rows * ngroups * 2]).reshape(rows, ngroups)
        w = q.reshape(rows, ngroups, group).astype(np.float32) * scales[:, :, None]
        return np.ascontiguousarray(w.reshape(rows, padded)[:, :cols]).reshape(shape)

    # ---- codebooks
    def _load_codebooks(self):
        data = np.fromfile(os.path.join(self.path, "codebooks.bin"), dtype=np.uint8)
        per = 16 + self.entries * self.vec_dim * 2
        if data.size % per:
            raise FormatError("codebooks.bin: not a whole number of codebooks")
        self.codebooks = []
        for i in range(data.size // per):
            h = CODEBOOK_HEADER.unpack(data[i * per:i * per + 16].tobytes())
            magic, cid, _fmt, vec_dim, entries, _ = h
            if magic != CODEBOOK_MAGIC or cid != (i & 0xFFFF) or vec_dim != self.vec_dim \
                    or entries != self.entries:
                raise FormatError(f"codebooks.bin: codebook {i} has a bad header {h}")
            body = data[i * per + 16:(i + 1) * per]
            self.codebooks.append(f16_to_f32(body).reshape(self.entries, self.vec_dim))

    # ---- expert records
    def record_layout(self) -> dict:
        """Offsets derived from the config: header, three index regions, scales."""
        h, i = self.expert_in, self.moe_inter
        rows = [i, i, h]
        cols = [h, h, i]
        off = EXPERT_HEADER.size
        regions = []
        for r, c in zip(rows, cols):
            pr = -(-r // self.index_block) * self.index_block if self.index_block else r
            size = pr * (c // self.vec_dim) * self.bytes_per_vector
            regions.append((off, size))
            off += size
        scales_off = off
        end = scales_off + (0 if self.expert_fmt == BF16R else 2 * sum(rows))
        record = -(-end // ALIGN) * ALIGN
        return {"rows": rows, "cols": cols, "regions": regions, "scales_off": scales_off,
                "payload_end": end, "record_bytes": record}

    def _bank(self, layer: int) -> np.ndarray:
        if layer not in self._banks:
            meta = self.layers[layer]
            if meta["file"] != f"experts-L{layer}.bin":
                raise FormatError(f"layer {layer}: bank file {meta['file']!r}")
            self._banks[layer] = np.fromfile(os.path.join(self.path, meta["file"]), np.uint8)
        return self._banks[layer]

    def record(self, layer: int, expert: int, check_crc: bool = True) -> tuple:
        lay = self.record_layout()
        meta = self.layers[layer]
        rb = lay["record_bytes"]
        if int(meta["bytes"]) != rb * int(meta["experts"]):
            raise FormatError(f"layer {layer}: bank bytes {meta['bytes']} != "
                              f"{meta['experts']} x {rb}")
        bank = self._bank(layer)
        if bank.size != int(meta["bytes"]):
            raise FormatError(f"experts-L{layer}.bin: {bank.size} bytes, manifest says {meta['bytes']}")
        rec = bank[expert * rb:(expert + 1) * rb]
        h = EXPERT_HEADER.unpack(rec[:48].tobytes())
        (magic, hl, he, fmt, flags, cb, lowrank, _r0, blocks,
         goff, uoff, doff, soff, crc, _r1, _r2) = h
        where = f"experts-L{layer}.bin: record {expert}"
        if magic != EXPERT_MAGIC:
            raise FormatError(f"{where}: bad magic {magic:#x}")
        if hl != layer or he != expert:
            raise FormatError(f"{where} says layer {hl} expert {he}")
        if blocks * ALIGN != rb:
            raise FormatError(f"{where}: {blocks} blocks, expected {rb // ALIGN}")
        if lowrank != 0 or (flags & 1):
            raise FormatError(f"{where}: lowrank_id {lowrank} / bf16 flag not supported")
        if cb != int(meta["codebook_base"]):
            raise FormatError(f"{where}: codebook_id {cb} != codebook_base {meta['codebook_base']}")
        ok_fmt = {BF16R} if self.expert_fmt == BF16R else {VQ4P} if self.index_bits == 6 else {VQ3R, VQ2R}
        if fmt not in ok_fmt:
            raise FormatError(f"{where}: fmt {fmt} disagrees with index_bits {self.index_bits}")
        want = [r[0] for r in lay["regions"]] + [lay["scales_off"]]
        if [goff, uoff, doff, soff] != want:
            raise FormatError(f"{where}: offsets {[goff, uoff, doff, soff]} != derived {want}")
        if check_crc:
            got = zlib.crc32(rec[48:lay["payload_end"]].tobytes()) & 0xFFFFFFFF
            if got != crc:
                raise FormatError(f"{where}: crc32 {got:#010x} != header {crc:#010x}")
        return rec, lay, cb

    def expert_indices(self, layer: int, expert: int, matrix: int) -> np.ndarray:
        """[rows, cols/8, stages] codebook indices of one matrix of a record."""
        rec, lay, _ = self.record(layer, expert)
        return self._indices(rec, lay, matrix)

    def _indices(self, rec, lay, m) -> np.ndarray:
        rows, cols = lay["rows"][m], lay["cols"][m]
        nvec = cols // self.vec_dim
        off, size = lay["regions"][m]
        raw = rec[off:off + size]
        bpv = self.bytes_per_vector
        if self.index_block:
            B = self.index_block
            nb = -(-rows // B)
            # [row_block][vector][row_in_block][bytes] -> [row][vector][bytes]
            raw = raw.reshape(nb, nvec, B, bpv).transpose(0, 2, 1, 3).reshape(nb * B, nvec, bpv)
            raw = raw[:rows]
        else:
            raw = raw.reshape(rows, nvec, bpv)
        if self.index_bits == 6:
            return unpack_vq4(raw)
        return raw.astype(np.int64)

    def expert(self, layer: int, expert: int) -> dict:
        """Dequantized float32 gate [moe_inter, expert_in], up [moe_inter,
        expert_in], down [expert_in, moe_inter] of one routed expert."""
        rec, lay, cb = self.record(layer, expert)
        so = lay["scales_off"]
        out = {}
        if self.expert_fmt == BF16R:
            for m, name in enumerate(MATRICES):
                off, size = lay["regions"][m]
                out[name] = bf16_to_f32(rec[off:off + size]).reshape(lay["rows"][m], lay["cols"][m])
            return out
        for m, name in enumerate(MATRICES):
            rows, cols = lay["rows"][m], lay["cols"][m]
            idx = self._indices(rec, lay, m)
            if idx.max(initial=0) >= self.entries:
                raise FormatError(f"experts-L{layer}.bin: record {expert}: index past the codebook")
            acc = np.zeros((rows, cols // self.vec_dim, self.vec_dim), np.float32)
            for s in range(self.stages):
                acc += self.codebooks[cb + m * self.stages + s][idx[:, :, s]]
            scale = f16_to_f32(rec[so:so + 2 * rows])
            so += 2 * rows
            out[name] = (acc.reshape(rows, cols) * scale[:, None]).astype(np.float32)
        return out

    # ---- identity
    def file_hashes(self) -> dict:
        """sha256 of manifest.json and of every file it names."""
        names = ["manifest.json", "trunk.bin", "codebooks.bin"]
        names += sorted((m["file"] for m in self.layers.values()),
                        key=lambda f: int(f[len("experts-L"):-len(".bin")]))
        for extra in ("tokenizer.model", "specials.json", "chat.json"):
            if os.path.exists(os.path.join(self.path, extra)):
                names.append(extra)
        out = {}
        for n in names:
            h = hashlib.sha256()
            with open(os.path.join(self.path, n), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[n] = h.hexdigest()
        return out
