"""A reader for a Kimi K3 checkpoint in the released Hugging Face layout, with
the interface of container.Container, so the reference runs on either.

    c = Checkpoint("/tmp/k3/ckpt")
    w = c.tensor("model.layers.0.self_attn.g_proj.weight")   # np.float32, name without the prefix
    e = c.expert(1, 7)                                        # {"gate","up","down"} np.float32

The text model's config is config.json's text_config and its tensors carry the
prefix `language_model.`; a checkpoint without text_config is read flat. A
routed expert's matrix is compressed-tensors' MXFP4 pair, decoded here exactly
from the format's definition (not from any converter):
  weight_packed U8 [out, in/2]: element 2j in the low nibble of byte j, 2j+1 in
    the high one; a nibble is E2M1, bit 3 the sign, bits 0-2 index the
    magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6
  weight_scale U8 [out, in/32]: E8M0, the scale of 32 consecutive elements of a
    row is 2^(e - 127)
BF16, F16 and F32 tensors are read as they are.
"""

from __future__ import annotations

import json
import os

import numpy as np
from safetensors import safe_open

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)
MXFP4_GROUP = 32
TAGS = {"gate": "w1", "up": "w3", "down": "w2"}


def decode_mxfp4(packed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    rows, half = packed.shape
    cols = 2 * half
    if scale.shape != (rows, cols // MXFP4_GROUP):
        raise ValueError(f"weight_scale {scale.shape} does not fit weight_packed {packed.shape}")
    codes = np.empty((rows, cols), np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    vals = E2M1[codes & 7] * np.where(codes & 8, -1.0, 1.0).astype(np.float32)
    s = np.ldexp(np.float32(1.0), scale.astype(np.int32) - 127).astype(np.float32)
    return (vals.reshape(rows, -1, MXFP4_GROUP) * s[:, :, None]).reshape(rows, cols)


class Checkpoint:
    def __init__(self, path: str):
        self.path = path
        with open(os.path.join(path, "config.json")) as f:
            outer = json.load(f)
        nested = "text_config" in outer
        self.config = outer["text_config"] if nested else outer
        self.prefix = "language_model." if nested else ""
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                self.weight_map = json.load(f)["weight_map"]
        else:
            with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
                self.weight_map = {k: "model.safetensors" for k in f.keys()}

    def cfg(self, *keys, default=None):
        for k in keys:
            if self.config.get(k) is not None:
                return self.config[k]
        return default

    def _raw(self, full: str) -> np.ndarray:
        with safe_open(os.path.join(self.path, self.weight_map[full]), "pt") as f:
            t = f.get_tensor(full)
        # numpy has no bfloat16: widen through torch, which is exact.
        return t.float().numpy() if t.is_floating_point() else t.numpy()

    def has(self, name: str) -> bool:
        return self.prefix + name in self.weight_map

    def tensor(self, name: str) -> np.ndarray:
        return self._raw(self.prefix + name).astype(np.float32)

    def matrix(self, name: str) -> np.ndarray:
        """`name`.weight as float32, from an MXFP4 pair when that is how it is stored."""
        full = self.prefix + name
        if full + ".weight" in self.weight_map:
            return self._raw(full + ".weight").astype(np.float32)
        return decode_mxfp4(self._raw(full + ".weight_packed"), self._raw(full + ".weight_scale"))

    def expert(self, layer: int, expert: int) -> dict:
        p = f"model.layers.{layer}.block_sparse_moe.experts.{expert}."
        return {k: self.matrix(p + tag) for k, tag in TAGS.items()}
