#!/usr/bin/env bash
# On the GPU machine: the cost of the HTTP front (issue 26's measurement). tandemd serves a random
# Qwen3-8B-shaped model on GPU 0; streaming decode tokens/s and time to first chunk through its
# socket (`tandem loadgen --raw`) against the same load through tandem-http (/v1/completions,
# streamed; scripts/http_load.py, standard library only) at 1 and 4 clients; one table.
# Env: BUILD_DIR (build-gpu; tandemd, tandem, tandem-http, tandem-model built there), GPU (0; -1:
# the CPU backend, to try the script anywhere), MODEL (a GGUF to serve instead of the random one),
# PRESET (qwen3-8b), TYPE (Q4_K_M), CLIENTS ("1 4"), TOKENS (128), REQUESTS (per client count,
# default max(8, 2c)), PARALLEL (8), CONTEXT (1024).
# Usage (repo root, .devdeps/ alongside): bash scripts/gpu_http_run.sh
#   on a CPU: GPU=-1 MODEL=$(bash scripts/fetch_model.sh) TOKENS=32 BUILD_DIR=build bash scripts/gpu_http_run.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu} gpu=${GPU:-0}
run_name=http-run
source scripts/daemon_run.sh
need_files "$td" "$tc" "$th"

m=${MODEL:-}
if [[ -z $m ]]; then
  m=$work/model.gguf
  "$tm" make --preset "${PRESET:-qwen3-8b}" --type "${TYPE:-Q4_K_M}" --row-pool 256 -o "$m" -q || exit 1
fi
if [[ $gpu -ge 0 ]]; then
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader | sed -n "$((gpu + 1))p")
else
  device="CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
fi
echo "== $(basename "$m") on $device, tree ${TANDEM_TREE:-unrecorded (set TANDEM_TREE)}, $(date -u +%FT%TZ)"

"$td" --socket "$sock" --config /dev/null --gpu "$gpu" --parallel "${PARALLEL:-8}" --context "${CONTEXT:-1024}" \
  --model "m=$m" >"$work/tandemd.log" 2>&1 &
pids+=($!)
wait_resident 120 || { echo "gpu_http_run: the model did not become resident" >&2; tail -5 "$work/tandemd.log" >&2; exit 1; }

"$th" --socket "$sock" --listen 127.0.0.1:0 >"$work/http.log" 2>&1 &
pids+=($!)
port=
for _ in $(seq 100); do
  port=$(grep -m1 -oE 'serving HTTP on 127\.0\.0\.1:[0-9]+' "$work/http.log" | grep -oE '[0-9]+$')
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { echo "gpu_http_run: tandem-http did not start" >&2; cat "$work/http.log" >&2; exit 1; }

python3 scripts/http_load.py --tandem "$tc" --socket "$sock" --http-port "$port" --clients "${CLIENTS:-1 4}" \
  --tokens "${TOKENS:-128}" --requests "${REQUESTS:-0}"
rc=$?
[[ $rc -eq 0 ]] || { tail -5 "$work/tandemd.log" "$work/http.log" >&2; }
exit $rc
