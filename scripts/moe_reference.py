#!/usr/bin/env python3
"""Reference outputs of tiny random mixture-of-experts models, from Hugging Face transformers.

--arch qwen3moe:  Qwen3MoeForCausalLM, hidden 64, 2 layers, attention 4/2 heads of 32 (q/k norm),
                  8 experts of 32 (not intermediate_size 96), top-2, norm_topk_prob true.
--arch qwen35moe: Qwen3_5MoeForCausalLM, hidden 64, layers [linear, linear, linear, full], attention
                  4/2 heads of 32 with a quarter rotary, DeltaNet 2 key / 4 value heads of 32, conv 4,
                  8 experts of 32 top-2 plus a shared expert of 48 with its sigmoid gate.
Both: vocab 512, float32, seed 0, every parameter drawn at random (norms, routers, experts, A_log
and dt_bias included), eager attention and eager experts (transformers' per-expert loop), and the
flash-linear-attention / causal-conv1d packages hidden so the torch paths run. The script refuses a
seed whose greedy choices or expert choices (the k-th against the (k+1)-th router probability, in
every layer at every position it runs) come near a tie, since fp32 rounding could flip those.

Writes to OUT_DIR, in the same format as scripts/qwen35_reference.py:
  config.json, model.safetensors   the checkpoint (save_pretrained; config.json in full)
  reference.json                   prompt (24 ids), float32 logits of its last 4 positions, argmax at
                                   every prompt position, a 64-token greedy continuation decoded with
                                   the cache, the argmax of one no-cache pass over prompt +
                                   continuation, the smallest top-1/top-2 logit margin and the
                                   smallest routing margin seen

Usage (no network needed): python3 scripts/moe_reference.py --arch qwen3moe tests/reference/qwen3moe_tiny
                           python3 scripts/moe_reference.py --arch qwen35moe tests/reference/qwen35moe_tiny
The CPU test tests/engine/convert/transformers_reference_test.cpp imports each directory's checkpoint and
compares.
"""
import argparse
import sys

for _name in ("fla", "causal_conv1d"):
    sys.modules[_name] = None

import torch  # noqa: E402

from reference_run import greedy_run, write_reference  # noqa: E402

VOCAB, HIDDEN, HEAD_DIM, CONV_K = 512, 64, 32, 4
N_EXPERT, TOP_K, FF_EXP, FF_SHEXP = 8, 2, 32, 48


def qwen3moe_model():
    try:
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    except ImportError:
        from transformers.models.qwen3_moe import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD_DIM, moe_intermediate_size=FF_EXP,
        num_experts=N_EXPERT, num_experts_per_tok=TOP_K, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], rms_norm_eps=1e-6, max_position_embeddings=4096, tie_word_embeddings=False,
        hidden_act="silu", rope_theta=1000000.0, attention_bias=False, use_sliding_window=False,
    )
    return Qwen3MoeForCausalLM, cfg, False


def qwen35moe_model():
    try:
        from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
    except ImportError:
        from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD_DIM, linear_conv_kernel_dim=CONV_K,
        linear_key_head_dim=32, linear_value_head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
        moe_intermediate_size=FF_EXP, shared_expert_intermediate_size=FF_SHEXP, num_experts=N_EXPERT,
        num_experts_per_tok=TOP_K, rms_norm_eps=1e-6, max_position_embeddings=4096, tie_word_embeddings=False,
        hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    )
    return Qwen3_5MoeForCausalLM, cfg, True


def build(arch):
    cls, cfg, zero_centred = qwen3moe_model() if arch == "qwen3moe" else qwen35moe_model()
    kwargs = {"attn_implementation": "eager"}
    try:  # transformers 5 picks a grouped-GEMM experts kernel unless told otherwise
        model = cls._from_config(cfg, experts_implementation="eager", **kwargs)
    except TypeError:
        model = cls._from_config(cfg, **kwargs)
    model = model.to(torch.float32).eval()
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    return model, zero_centred


def randomize(model, zero_centred):
    """Every parameter random, at scales that keep activations O(1) and logits a few units apart."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.1, 4.0).log())
            elif name.endswith("dt_bias"):
                p.normal_(0.5, 0.5)
            elif name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: x * w
                p.uniform_(0.5, 1.5)
            elif name.endswith("norm.weight"):
                if zero_centred:  # Qwen3.5's RMSNorms: x * (1 + w)
                    p.normal_(0.0, 0.2)
                else:  # Qwen3's: x * w
                    p.uniform_(0.5, 1.5)
            elif "conv1d" in name:
                p.normal_(0.0, 1.0 / CONV_K**0.5)
            elif name == "model.embed_tokens.weight":
                p.normal_(0.0, 1.0)
            elif name == "lm_head.weight":
                p.normal_(0.0, 2.0 / HIDDEN**0.5)
            elif name.endswith("mlp.gate.weight"):  # the router: logits of about unit scale
                p.normal_(0.0, 2.0 / HIDDEN**0.5)
            elif p.ndim in (2, 3):  # matrices and stacked experts [E, out, in]
                p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)
            else:
                raise SystemExit(f"no rule to randomize {name} {tuple(p.shape)}")


class routing_margins:
    """The smallest gap between the k-th and (k+1)-th router probability, over every router call."""

    def __init__(self, model):
        self.min = float("inf")
        for name, m in model.named_modules():
            if name.endswith("mlp.gate") and hasattr(m, "weight"):
                m.register_forward_hook(self.hook)

    def hook(self, module, args, output):
        x = args[0].reshape(-1, module.weight.shape[1]).float()
        probs = torch.softmax(torch.nn.functional.linear(x, module.weight.float()), dim=-1)
        top = torch.topk(probs, TOP_K + 1, dim=-1).values
        self.min = min(self.min, float((top[:, TOP_K - 1] - top[:, TOP_K]).min()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--arch", choices=["qwen3moe", "qwen35moe"], required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_grad_enabled(False)

    model, zero_centred = build(args.arch)
    randomize(model, zero_centred)
    routes = routing_margins(model)

    run, scale = greedy_run(model, VOCAB)
    # Router probabilities are O(1/k); fp32 differences are ~1e-6 of them.
    if routes.min < 1e-4:
        raise SystemExit(f"an expert choice is within {routes.min:.2e} of a tie; try another --seed")
    write_reference(args.out_dir, model, "scripts/moe_reference.py --arch " + args.arch, args.seed, run, scale,
                    extra={"min_routing_margin": routes.min},
                    extra_note=f"min routing margin {routes.min:.3g}, ")


if __name__ == "__main__":
    main()
