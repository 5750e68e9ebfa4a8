#!/usr/bin/env bash
# Independent check of the architectures against Hugging Face transformers, in one command:
#   tests/reference/transformers/run_check.sh PATH/TO/tandem-model [WORKDIR]
# Needs python3 with torch and transformers (no network). Builds random-weight Qwen3, Qwen2 and
# Llama models, imports each to GGUF as F32, F16 and Q8_0 with `tandem-model import`, and
# compares `tandem-model logits` with transformers' float64 logits. Exit status 0 when all pass.
set -euo pipefail
TANDEM=$(realpath "${1:?usage: run_check.sh PATH/TO/tandem-model [WORKDIR]}")
WORK=${2:-$(mktemp -d /tmp/tandem-refcheck.XXXXXX)}
HERE=$(cd "$(dirname "$0")" && pwd)

# Tolerances on max|Δ|/max|ref| per position. F32 is the engine's own error; F16 and Q8_0 add
# the rounding of the weights themselves (F16 ~1e-3 relative per weight, Q8_0 ~1/254 of a block's
# largest weight), so they are looser. See tests/reference/transformers/README.md.
declare -A TOL=([F32]=1e-4 [F16]=5e-3 [Q8_0]=5e-2)

# The importer's command line (helper "import" owns it); adjust here if it changes.
import_model() {  # hf_dir type out.gguf
  "$TANDEM" import "$1" --type "$2" -o "$3"
}

python3 "$HERE/make_reference.py" --out "$WORK"
fail=0
for arch in qwen3 qwen2 llama; do
  ref="$WORK/$arch/reference.json"
  tokens=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' "$ref")
  for type in F32 F16 Q8_0; do
    gguf="$WORK/$arch/$type.gguf"
    import_model "$WORK/$arch/hf" "$type" "$gguf"
    "$TANDEM" logits -m "$gguf" --tokens "$tokens" --kv-type f32 -o "$WORK/$arch/$type.logits.json"
    python3 "$HERE/compare.py" "$ref" "$WORK/$arch/$type.logits.json" --tol "${TOL[$type]}" \
      --name "$arch $type" || fail=1
  done
done
echo "work dir: $WORK"
exit $fail
