#!/usr/bin/env python3
# A second, torch-free reference for Llama-architecture GGUF files: its own small GGUF reader and
# dequantiser (F32, F16, Q8_0, Q4_1) and the forward pass written out in float64 numpy.
"""Writes {"tokens": [...], "logits": [...]} like reference_logits.py, without transformers and
without the engine's or the gguf package's reader: it follows llama.cpp's Llama graph (RMSNorm,
RoPE on adjacent pairs as GGUF stores Q/K, grouped-query attention, SwiGLU, tied head when
output.weight is absent). Needs python3 with numpy (Debian's python3-numpy)."""
import argparse
import json
import struct

import numpy as np

# GGUF metadata value types: struct format of the scalars; 8 string, 9 array.
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
           12: "<d"}
# ggml tensor types this reader handles: (elements per block, bytes per block).
BLOCKS = {0: (1, 4), 1: (1, 2), 3: (32, 20), 8: (32, 34)}  # F32, F16, Q4_1, Q8_0


class gguf_file:
    def __init__(self, path):
        self.buf = memoryview(open(path, "rb").read())
        self.pos = 0
        magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", self.buf, 0)
        if magic != b"GGUF" or version not in (2, 3):
            raise SystemExit(f"numpy_reference: {path} is not a GGUF v2/v3 file")
        self.pos = 24
        self.kv = {}
        for _ in range(n_kv):
            key = self.string()
            self.kv[key] = self.value(self.u("<I"))
        self.tensors = {}
        for _ in range(n_tensors):
            name = self.string()
            dims = [self.u("<Q") for _ in range(self.u("<I"))]
            self.tensors[name] = (dims, self.u("<I"), self.u("<Q"))
        align = self.kv.get("general.alignment", 32)
        self.data = (self.pos + align - 1) // align * align

    def u(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.u("<Q")
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos]).decode()

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.u("<I"), self.u("<Q")
            return [self.value(et) for _ in range(n)]
        return self.u(SCALARS[t])

    def weight(self, name):
        """The tensor as float64, shaped (rows, row length): ggml's ne reversed."""
        dims, t, off = self.tensors[name]
        if t not in BLOCKS:
            raise SystemExit(f"numpy_reference: {name}: ggml type {t} is not handled")
        n = int(np.prod(dims))
        per, size = BLOCKS[t]
        raw = np.frombuffer(self.buf, np.uint8, n // per * size, self.data + off)
        if t == 0:
            w = raw.view("<f4")
        elif t == 1:
            w = raw.view("<f2")
        elif t == 8:  # Q8_0: f16 scale, 32 int8
            b = raw.reshape(-1, 34)
            w = b[:, :2].copy().view("<f2").astype(np.float32) * b[:, 2:].view(np.int8)
        else:  # Q4_1: f16 scale d, f16 min m, 16 bytes: low nibbles are elements 0-15, high 16-31
            b = raw.reshape(-1, 20)
            d = b[:, 0:2].copy().view("<f2").astype(np.float32)
            m = b[:, 2:4].copy().view("<f2").astype(np.float32)
            q = np.concatenate([b[:, 4:] & 0x0F, b[:, 4:] >> 4], axis=1)
            w = d * q + m
        return w.astype(np.float64).reshape(list(reversed(dims)))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("gguf")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tokens = [int(t) for t in a.tokens.split(",") if t]
    f = gguf_file(a.gguf)
    arch = f.kv["general.architecture"]
    if arch != "llama":
        raise SystemExit(f"numpy_reference: architecture {arch} is not llama")
    n_layer = f.kv["llama.block_count"]
    n_head = f.kv["llama.attention.head_count"]
    n_kv = f.kv["llama.attention.head_count_kv"]
    eps = f.kv["llama.attention.layer_norm_rms_epsilon"]
    base = f.kv.get("llama.rope.freq_base", 10000.0)
    tensors = f.tensors
    weight = f.weight

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    emb = weight("token_embd.weight")
    n_embd = emb.shape[1]
    hd = n_embd // n_head
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    theta = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = pos[:, None] * theta[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):  # x: (T, heads, hd); pairs (2i, 2i+1), llama.cpp's normal mode
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = emb[tokens]
    for il in range(n_layer):
        p = f"blk.{il}."
        h = rms(x, weight(p + "attn_norm.weight"))
        q = rope((h @ weight(p + "attn_q.weight").T).reshape(T, n_head, hd))
        k = rope((h @ weight(p + "attn_k.weight").T).reshape(T, n_kv, hd))
        v = (h @ weight(p + "attn_v.weight").T).reshape(T, n_kv, hd)
        att = np.empty((T, n_head, hd))
        for hh in range(n_head):
            kv = hh // (n_head // n_kv)
            s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            att[:, hh, :] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, kv, :]
        x = x + att.reshape(T, n_embd) @ weight(p + "attn_output.weight").T
        h = rms(x, weight(p + "ffn_norm.weight"))
        g = h @ weight(p + "ffn_gate.weight").T
        u = h @ weight(p + "ffn_up.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ weight(p + "ffn_down.weight").T
    x = rms(x, weight("output_norm.weight"))
    head = weight("output.weight") if "output.weight" in tensors else emb
    logits = x @ head.T
    with open(a.out, "w") as f:
        json.dump({"tokens": tokens, "logits": logits.tolist()}, f)
    print(f"numpy_reference: {T} tokens, {n_layer} layers, {n_head}/{n_kv} heads, head dim {hd}, "
          f"vocab {logits.shape[1]}")


if __name__ == "__main__":
    main()
