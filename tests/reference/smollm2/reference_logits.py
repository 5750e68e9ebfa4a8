#!/usr/bin/env python3
# Logits of the real default model (SmolLM2 GGUF) from Hugging Face transformers, for token ids that
# `tandem-model tokenize` produced, so the engine's Q4_1 arithmetic can be checked against them.
"""Loads GGUF with transformers (which dequantises every tensor with the `gguf` package), runs
the forward pass in float64 on the CPU (no TF32 or reduced-precision kernels in the way) and writes
{"tokens": [...], "logits": [[...] per position]} in the layout tests/reference/transformers/compare.py
reads. Needs python3 with torch, transformers and gguf; no network."""
import argparse
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("gguf")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tokens = [int(t) for t in a.tokens.split(",") if t]
    path = os.path.abspath(a.gguf)
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32)
    model = model.to(torch.float64).eval()

    # SmolLM2's GGUF has no output.weight: the head must be the token embedding. Say so if the
    # loader did not tie them, since the logits would then come from a random head.
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    if head.data_ptr() != emb.data_ptr() and not torch.equal(head, emb):
        sys.exit("reference_logits: lm_head is not the token embedding (tie_word_embeddings lost)")

    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0]
    with open(a.out, "w") as f:
        json.dump({"tokens": tokens, "logits": logits.tolist()}, f)
    cfg = model.config
    print(f"reference_logits: {len(tokens)} tokens, vocab {logits.shape[-1]}, hidden {cfg.hidden_size}, "
          f"layers {cfg.num_hidden_layers}, heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}, "
          f"rope theta {getattr(cfg, 'rope_theta', None)}; transformers {__import__('transformers').__version__}, "
          f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
