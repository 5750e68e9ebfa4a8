#!/usr/bin/env bash
# The default model (SmolLM2 GGUF) against Hugging Face transformers, and CPU against CUDA, in one
# command on a GPU machine with no network:  run_check.sh TANDEM_MODEL_BIN GGUF [WORKDIR]
# Needs python3 with torch, transformers, numpy and gguf (see README.md here). Exit 0: all passed.
set -euo pipefail
TANDEM=$(realpath "${1:?usage: run_check.sh TANDEM_MODEL_BIN GGUF [WORKDIR]}")
GGUF=$(realpath "${2:?usage: run_check.sh TANDEM_MODEL_BIN GGUF [WORKDIR]}")
WORK=${3:-$(mktemp -d /tmp/tandem-smollm2-check.XXXXXX)}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
mkdir -p "$WORK"
fail=0
start=$SECONDS

# 1. Logits: ours (Q4_1 weights, float32 arithmetic, f32 KV cache) against two float64 references
# over the same weights dequantised by the gguf package: transformers' forward pass, and
# numpy_reference.py's (llama.cpp's graph written out in numpy, no torch). The ids come from our
# tokenizer so all see the same input; control tokens included (a ChatML turn).
# Tolerance on max|Δ|/max|ref| per position: numpy_reference.py measured 3.0e-6 on a CPU machine
# (README.md), so 1e-4 leaves a margin of about 30x for float32 summation order.
LOGITS_TOL=1e-4
# SKIP_LOGITS=1 runs only part 2 (CPU against CUDA), e.g. to recheck it after a kernel change.
if [ "${SKIP_LOGITS:-0}" != 1 ]; then
prompt=$'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France? Answer in one sentence.<|im_end|>\n<|im_start|>assistant\nThe capital of France is'
tokens=$(printf '%s' "$prompt" | "$TANDEM" tokenize -m "$GGUF" --special | tr -d '[] \n')
echo "tokens ($(tr ',' '\n' <<<"$tokens" | wc -l)): $tokens"
"$TANDEM" logits -m "$GGUF" --tokens "$tokens" --kv-type f32 -o "$WORK/tandem.json"
python3 "$HERE/reference_logits.py" "$GGUF" --tokens "$tokens" --out "$WORK/transformers.json" ||
  { echo "FAIL: transformers reference"; fail=1; }
python3 "$ROOT/tests/reference/transformers/compare.py" "$WORK/transformers.json" "$WORK/tandem.json" \
  --tol "$LOGITS_TOL" --name "smollm2 Q4_1 vs transformers" || fail=1
python3 "$HERE/numpy_reference.py" "$GGUF" --tokens "$tokens" --out "$WORK/numpy.json" ||
  { echo "FAIL: numpy reference"; fail=1; }
python3 "$ROOT/tests/reference/transformers/compare.py" "$WORK/numpy.json" "$WORK/tandem.json" \
  --tol "$LOGITS_TOL" --name "smollm2 Q4_1 vs numpy" || fail=1
python3 "$ROOT/tests/reference/transformers/compare.py" "$WORK/numpy.json" "$WORK/transformers.json" \
  --tol "$LOGITS_TOL" --name "transformers vs numpy (the references agree)" || fail=1
# Golden data for CI (tests/model_quality/logits_check.py): the transformers logits, shrunk.
[ -s "$WORK/transformers.json" ] && python3 "$HERE/make_golden.py" "$WORK/transformers.json" \
  "$WORK/transformers_golden.json" --source "transformers $(python3 -c 'import transformers; print(transformers.__version__)'), float64, $(date -u +%F)"
echo "logits check: $((SECONDS - start)) s"
fi

# 2. CPU against CUDA. `tandem-model run` and `perplexity` run on CUDA device 0 with --gpu 0;
# a build without the CUDA backend (or a machine without a GPU) reports this part as skipped.
backend_flags() { [ "$1" = cuda ] && echo "--gpu 0"; true; }
if "$TANDEM" run -m "$GGUF" -p x -n 1 --gpu 0 >/dev/null 2>&1; then
  chat="What is the capital of France?"
  for be in cpu cuda; do
    "$TANDEM" run $(backend_flags "$be") -m "$GGUF" -p "$chat" --chat -n 64 --temp 0 >"$WORK/run.$be.txt"
  done
  if cmp -s "$WORK/run.cpu.txt" "$WORK/run.cuda.txt"; then
    echo "greedy chat, CPU and CUDA: same text: $(head -c 200 "$WORK/run.cpu.txt")"
  else
    echo "greedy chat, CPU and CUDA differ: FAIL"; diff "$WORK/run.cpu.txt" "$WORK/run.cuda.txt" || true
    fail=1
  fi

  # Perplexity per type, CUDA within 0.5% of CPU. Text: the quality test's Jargon File slice
  # when Debian's jargon-text is installed, else this repository's English docs (the comparison
  # is within one run, so any fixed English text does).
  text="$WORK/ppl.txt"
  if [ -r /usr/share/doc/jargon-text/jargon.txt.gz ]; then
    zcat /usr/share/doc/jargon-text/jargon.txt.gz | sed -n '275,1185p' >"$text"
  else
    cat "$ROOT"/README.md "$ROOT"/docs/*.md >"$text"
  fi
  "$TANDEM" quantize "$GGUF" "$WORK/F16.gguf" F16 --allow-requantize -q
  declare -A files=([Q4_1]="$GGUF" [F16]="$WORK/F16.gguf")
  for t in Q8_0 Q4_K_M; do
    "$TANDEM" quantize "$WORK/F16.gguf" "$WORK/$t.gguf" "$t" -q
    files[$t]="$WORK/$t.gguf"
  done
  for t in Q4_1 F16 Q8_0 Q4_K_M; do
    for be in cpu cuda; do
      "$TANDEM" perplexity $(backend_flags "$be") -m "${files[$t]}" -f "$text" --ctx 512 --chunks 8 \
        >"$WORK/ppl.$t.$be.txt" 2>/dev/null
    done
    python3 - "$t" "$WORK/ppl.$t.cpu.txt" "$WORK/ppl.$t.cuda.txt" <<'PY' || fail=1
import re, sys
name, a, b = sys.argv[1], *(float(re.search(r"PPL = ([0-9.]+)", open(p).read()).group(1)) for p in sys.argv[2:])
rel = abs(b - a) / a * 100
print(f"perplexity {name}: CPU {a:.4f}, CUDA {b:.4f}, |Δ| {rel:.3f}% (bound 0.5%): {'PASS' if rel <= 0.5 else 'FAIL'}")
sys.exit(0 if rel <= 0.5 else 1)
PY
  done
else
  echo "SKIP CPU vs CUDA: '$TANDEM run --gpu 0' does not run here (no CUDA backend or no GPU)"
fi

echo "work dir: $WORK; total $((SECONDS - start)) s"
exit $fail
