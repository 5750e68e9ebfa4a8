#!/usr/bin/env bash
# Decode throughput through the daemon's socket against `tandem-model run` on the same model, prompt
# and thread count (greedy, 128 tokens, 3 runs each; prints every run's figure).
# Usage: scripts/bench_overhead.sh [MODEL.gguf] [THREADS]   (default: SmolLM2, 1 thread)
# Env: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
model=${1:-$(bash scripts/fetch_model.sh)}
threads=${2:-1}
prompt="Tell me a long story about a dragon who learns to cook."
echo "tandem-model run (decode tok/s):"
for _ in 1 2 3; do
  "$build/client/tandem_model/tandem-model" run -m "$model" -p "$prompt" --chat -n 128 --temp 0 \
    -t "$threads" 2>&1 >/dev/null | sed -n 's/.*generated .*(\([0-9.]*\) tokens\/s).*/  \1/p'
done
dir=$(mktemp -d)
"$build/daemon/tandemd" --socket "$dir/s" --config /dev/null --threads "$threads" \
  --model "default=$model" 2>"$dir/log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 300); do
  "$build/client/tandem/tandem" --socket "$dir/s" models 2>/dev/null | grep -q resident && break
  sleep 0.2
done
echo "through tandemd (decode tok/s):"
for _ in 1 2 3; do
  "$build/client/tandem/tandem" --socket "$dir/s" run -v --temp 0 -n 128 "$prompt" 2>&1 >/dev/null |
    sed -n 's/.*tokens in .*(\([0-9.]*\) tok\/s), prompt.*/  \1/p'
done
