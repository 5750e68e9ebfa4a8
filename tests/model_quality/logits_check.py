#!/usr/bin/env python3
# The default model's logits against an independent float64 reference on CPU: tandem-model logits
# on a fixed ChatML prompt vs tests/reference/smollm2/numpy_reference.py (own GGUF reader, numpy),
# and vs Hugging Face transformers' logits committed as golden data (transformers_golden.json).
"""Exit status: 0 within tolerance, 1 failure, 77 skipped (no model, or python3 without numpy).
Tolerance max|Δ|/max|ref| ≤ 1e-4 per position; measured 3.0e-6 against numpy and 2.2e-6
against the transformers golden ids (docs/MODELS.md)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from quant_ladder import SKIP, SOURCE_DIR, find_model, skip

PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
          "<|im_end|>\n<|im_start|>user\nWhat is the capital of France? Answer in one sentence."
          "<|im_end|>\n<|im_start|>assistant\nThe capital of France is")
TOL = "1e-4"
GOLDEN = os.path.join(SOURCE_DIR, "tests", "reference", "smollm2", "transformers_golden.json")


def check_golden(ours_path):
    """Our logits at the golden ids (transformers on the H200, make_golden.py) within TOL."""
    gold, ours = json.load(open(GOLDEN)), json.load(open(ours_path))
    if gold["tokens"] != ours["tokens"]:
        print("golden: token lists differ (tokenizer changed?): FAIL")
        return 1
    worst, agree = 0.0, 0
    for row, got in zip(gold["rows"], ours["logits"]):
        worst = max(worst, max(abs(got[i] - v) for i, v in zip(row["ids"], row["values"])) / row["scale"])
        agree += max(range(len(got)), key=got.__getitem__) == row["argmax"]
    ok = worst <= float(TOL)
    print(f"smollm2 Q4_1 vs transformers golden ({gold['source']}): max rel err {worst:.3e} (tol {TOL}), "
          f"argmax agrees {agree}/{len(gold['rows'])}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok and agree == len(gold["rows"]) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tandem-model", required=True)
    a = ap.parse_args()
    try:
        import numpy  # noqa: F401  (only to skip cleanly; numpy_reference.py runs in its own process)
    except ImportError:
        skip(f"{sys.executable} has no numpy (Debian: python3-numpy, in scripts/install_deps.sh)")
    model = find_model()
    ref_dir = os.path.join(SOURCE_DIR, "tests", "reference")
    with tempfile.TemporaryDirectory(prefix="tandem-logits.") as work:
        ids = subprocess.run([a.tandem_model, "tokenize", "-m", model, "--special"], input=PROMPT,
                             stdout=subprocess.PIPE, text=True, check=True).stdout
        tokens = ids.strip().strip("[]").replace(" ", "")
        print(f"tokens: {tokens}", flush=True)
        ours, ref = os.path.join(work, "tandem.json"), os.path.join(work, "numpy.json")
        subprocess.run([a.tandem_model, "logits", "-m", model, "--tokens", tokens, "--kv-type", "f32",
                        "-o", ours], check=True)
        subprocess.run([sys.executable, os.path.join(ref_dir, "smollm2", "numpy_reference.py"), model,
                        "--tokens", tokens, "--out", ref], check=True)
        rc = subprocess.run([sys.executable, os.path.join(ref_dir, "transformers", "compare.py"), ref, ours,
                             "--tol", TOL, "--name", "smollm2 Q4_1 vs numpy float64"]).returncode
        return rc | check_golden(ours)


if __name__ == "__main__":
    sys.exit(main())
