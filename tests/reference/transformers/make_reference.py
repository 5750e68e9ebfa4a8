#!/usr/bin/env python3
"""Builds small random-weight Qwen3, Qwen2 and Llama models with Hugging Face transformers and
saves, per architecture, <out>/<arch>/hf/{config.json, model.safetensors} (float32 weights) and
<out>/<arch>/reference.json: a fixed token sequence and the logits transformers computes for it
in float64 (so the reference itself carries no float32 rounding).

Needs torch and transformers; no network access. Deterministic for a given --seed.
"""
import argparse
import json
import os

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

COMMON = dict(
    vocab_size=256,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    torch_dtype="float32",
)


def configs():
    # Qwen3: head_dim 64 differs from hidden/heads (32), as in the real models; untied head.
    yield "qwen3", Qwen3Config(**COMMON, head_dim=64, rope_theta=1e6, tie_word_embeddings=False,
                               attention_bias=False)
    # Qwen2: q/k/v biases, tied embeddings (as Qwen2-0.5B).
    yield "qwen2", Qwen2Config(**COMMON, rope_theta=1e6, tie_word_embeddings=True)
    # Llama: the importer must permute q/k for llama.cpp's normal-style RoPE.
    yield "llama", LlamaConfig(**COMMON, rope_theta=5e5, tie_word_embeddings=False,
                               attention_bias=False, mlp_bias=False)


def randomize(model, gen):
    """Every parameter random and non-zero: norms near 1, biases and matrices of useful size."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.4 * (torch.rand(p.shape, generator=gen) - 0.5))
            elif name.endswith(".bias"):
                p.copy_(torch.rand(p.shape, generator=gen) - 0.5)
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / fan_in ** 0.5))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--n-tokens", type=int, default=24)
    args = ap.parse_args()
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    for arch, cfg in configs():
        gen = torch.Generator().manual_seed(args.seed)
        cfg._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
        randomize(model, gen)
        if cfg.tie_word_embeddings:
            model.tie_weights()
        model.eval()
        hf_dir = os.path.join(args.out, arch, "hf")
        os.makedirs(hf_dir, exist_ok=True)
        model.save_pretrained(hf_dir, safe_serialization=True)
        tokens = torch.randint(0, cfg.vocab_size, (args.n_tokens,), generator=gen).tolist()
        with torch.no_grad():
            ref = model.to(torch.float64)(torch.tensor([tokens])).logits[0]
        with open(os.path.join(args.out, arch, "reference.json"), "w") as f:
            json.dump({"arch": arch, "tokens": tokens, "logits": ref.tolist()}, f)
        print(f"{arch}: saved {hf_dir} and reference logits for {len(tokens)} tokens")


if __name__ == "__main__":
    main()
