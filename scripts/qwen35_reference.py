#!/usr/bin/env python3
"""Reference outputs of a tiny random Qwen3.5 text model, from Hugging Face transformers.

Builds Qwen3_5ForCausalLM from a shrunk config (hidden 64, layers [linear, linear, linear, full],
attention 4/2 heads of 32 with a quarter rotary, DeltaNet 2 key / 4 value heads of 32, conv 4,
vocab 512), float32, seed 0, with every parameter drawn at random (norms, A_log and dt_bias
included, so the importer's +1 folding, -exp(A_log) and V-head reorder all show in the logits).
It forces transformers' pure-PyTorch paths: eager attention, and the flash-linear-attention and
causal-conv1d packages hidden so the torch chunked / recurrent gated delta rule and the torch conv
run. Writes to OUT_DIR:

  config.json, model.safetensors   the checkpoint (save_pretrained; config.json in full, not a diff)
  reference.json                   prompt (24 ids), float32 logits of its last 4 positions,
                                   argmax at every prompt position, a 64-token greedy continuation
                                   decoded with the cache (the recurrent path), the argmax of one
                                   no-cache pass over prompt + continuation (chunked path, two
                                   chunks) that must agree with it, and the smallest top-1/top-2
                                   logit margin seen (how far greedy is from a tie)

Usage (no network needed): python3 scripts/qwen35_reference.py OUT_DIR [--seed 0]
The CPU test tests/engine/convert/transformers_reference_test.cpp imports OUT_DIR's checkpoint and
compares (OUT_DIR = tests/reference/qwen35_tiny).
"""
import argparse
import sys

# Hide the optional fast-kernel packages before transformers looks for them: its kernel decorators
# pick flash-linear-attention / causal-conv1d at import time when they can be imported.
for _name in ("fla", "causal_conv1d"):
    sys.modules[_name] = None

import torch  # noqa: E402

from reference_run import greedy_run, write_reference  # noqa: E402

try:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
except ImportError:  # older 5.x releases export them only from the model package
    from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig

VOCAB, HIDDEN, HEAD_DIM, CONV_K = 512, 64, 32, 4


def make_config():
    cfg = Qwen3_5TextConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=HEAD_DIM,
        linear_conv_kernel_dim=CONV_K,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        hidden_act="silu",
        # 32 x 0.25 = 8 rotary dims = 4 pairs, so the sections must sum to 4 (the default
        # [11, 11, 10] would need 64 rotary dims).
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    )
    return cfg


def randomize(model):
    """Every parameter random, at scales that keep activations O(1) and logits a few units apart."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.1, 4.0).log())  # A = exp(A_log) in [0.1, 4]
            elif name.endswith("dt_bias"):
                p.normal_(0.5, 0.5)
            elif name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: x * w
                p.uniform_(0.5, 1.5)
            elif name.endswith("norm.weight"):  # zero-centred RMSNorms: x * (1 + w)
                p.normal_(0.0, 0.2)
            elif "conv1d" in name:
                p.normal_(0.0, 1.0 / CONV_K**0.5)
            elif name == "model.embed_tokens.weight":
                p.normal_(0.0, 1.0)
            elif name == "lm_head.weight":
                p.normal_(0.0, 2.0 / HIDDEN**0.5)
            elif p.ndim == 2:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
            else:
                raise SystemExit(f"no rule to randomize {name} {tuple(p.shape)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_grad_enabled(False)

    model = Qwen3_5ForCausalLM._from_config(make_config(), attn_implementation="eager")
    model = model.to(torch.float32).eval()
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    randomize(model)

    run, scale = greedy_run(model, VOCAB)
    write_reference(args.out_dir, model, "scripts/qwen35_reference.py", args.seed, run, scale)


if __name__ == "__main__":
    main()
