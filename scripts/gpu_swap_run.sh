#!/usr/bin/env bash
# On the GPU machine: issue 25's swap figures. tandemd serves one alias on GPU 0 and swaps it
# between an 8B-shaped Q4_K_M and Q8_0 file, warm (files in the page cache) and cold (their pages
# dropped first), beside the ceilings measured in the same run (pinned host-to-device copies and a
# read() of the file, from backend_cuda_upload_test's benchmark); then CLIENTS streaming clients
# (`tandem loadgen --duration`) while the alias is swapped every SWAP_EVERY seconds, and BURST
# clients at once with the default queue depth (none may get `busy`). One table at the end.
# Env: BUILD_DIR (build-gpu; tandemd, tandem, tandem-model and, for the ceilings,
# tests/engine/backend/cuda/backend_cuda_upload_test built there), GPU (0; -1: the CPU backend, to
# try the script anywhere), MODELS (two GGUF files to swap between instead of the random ones),
# PRESET (qwen3-8b), TYPES ("Q4_K_M Q8_0"), ROUNDS (warm swaps each way, 3), CLIENTS (32),
# SECONDS_UNDER_LOAD (60), SWAP_EVERY (2), BURST (24), TOKENS (64), CEILINGS (1; 0 skips them),
# UNDER_LOAD (1; 0 stops after the timed swaps).
# Usage (repo root, .devdeps/ alongside): bash scripts/gpu_swap_run.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu} gpu=${GPU:-0}
run_name=swap-run
source scripts/daemon_run.sh
need_files "$td" "$tc"

read -ra files <<<"${MODELS:-}"
if [[ ${#files[@]} -eq 0 ]]; then
  for t in ${TYPES:-Q4_K_M Q8_0}; do
    files+=("$work/$t.gguf")
    "$tm" make --preset "${PRESET:-qwen3-8b}" --type "$t" --row-pool 256 -o "$work/$t.gguf" -q &
  done
  wait
fi
[[ ${#files[@]} -eq 2 ]] || { echo "gpu_swap_run: two model files are needed, got ${#files[@]}" >&2; exit 1; }
for f in "${files[@]}"; do [[ -s $f ]] || { echo "gpu_swap_run: $f was not made" >&2; exit 1; }; done
if [[ $gpu -ge 0 ]]; then
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader | sed -n "$((gpu + 1))p")
else
  device="CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
fi
echo "== swaps between $(for f in "${files[@]}"; do printf '%s (%s B) ' "$(basename "$f")" "$(stat -c %s "$f")"; done)on $device, tree ${TANDEM_TREE:-unrecorded (set TANDEM_TREE)}, $(date -u +%FT%TZ)"

# The ceilings, on a 4 GiB file of the same disk (the benchmark prints H2D, read() and the
# uploader's warm/cold rates for both of its sources).
ub=$build/tests/engine/backend/cuda/backend_cuda_upload_test
if [[ ${CEILINGS:-1} == 1 && $gpu -ge 0 && -x $ub ]]; then
  TMPDIR=$work TANDEM_UPLOAD_BENCH_GIB=${BENCH_GIB:-4} "$ub" --gtest_filter='big.*' 2>&1 | grep -vE '^\[|^$|^Note:'
fi

# Cold: the file's pages leave the page cache (drop_caches where allowed, else fadvise).
drop() {
  sync
  { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null ||
    python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}
warm() { cat "$1" >/dev/null; }

"$td" --socket "$sock" --config /dev/null --gpu "$gpu" --model "m=${files[0]}" >"$work/tandemd.log" 2>&1 &
pids+=($!)
wait_resident 180 || { echo "gpu_swap_run: the model did not become resident" >&2; tail -5 "$work/tandemd.log" >&2; exit 1; }

# One swap: "<what> <file> <wall s> <load bytes> <load s>" (load: the reply's figures).
swap_to() {
  local what=$1 f=$2 t0 out
  t0=$(date +%s.%N)
  out=$("$tc" --socket "$sock" --json swap m "$f" 2>&1) || { echo "$what $(basename "$f") FAILED: $out"; return 1; }
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); l=r["model"]["load"]; print(sys.argv[2], sys.argv[3], "%.3f" % (float(sys.argv[5]) - float(sys.argv[4])), l["bytes"], "%.3f" % l["seconds"])' \
    "$out" "$what" "$(basename "$f")" "$t0" "$(date +%s.%N)"
}
: >"$work/swaps"
for f in "${files[@]}"; do warm "$f"; done
for _ in $(seq "${ROUNDS:-3}"); do
  swap_to warm "${files[1]}" >>"$work/swaps"
  swap_to warm "${files[0]}" >>"$work/swaps"
done
for f in "${files[1]}" "${files[0]}"; do
  drop "$f"
  swap_to cold "$f" >>"$work/swaps"
done
echo "# swap: what file wall_s load_bytes load_s GB/s (load bytes over load seconds)"
awk '{ if ($3 == "FAILED") print; else printf "%s %s %s %s %s %.2f\n", $1, $2, $3, $4, $5, $4 / $5 / 1e9 }' "$work/swaps"

# Under load: a swap every SWAP_EVERY seconds while CLIENTS stream; then a burst of BURST.
[[ ${UNDER_LOAD:-1} == 1 ]] || exit 0
for f in "${files[@]}"; do warm "$f"; done
"$tc" --socket "$sock" --json loadgen -c "${CLIENTS:-32}" --duration "${SECONDS_UNDER_LOAD:-60}" -n "${TOKENS:-64}" \
  --raw >"$work/loadgen.json" 2>"$work/loadgen.err" &
lg=$!
swaps=0 swap_failures=0 i=1
while kill -0 "$lg" 2>/dev/null; do
  sleep "${SWAP_EVERY:-2}"
  kill -0 "$lg" 2>/dev/null || break
  if "$tc" --socket "$sock" --json swap m "${files[i]}" >/dev/null 2>>"$work/swap.err"; then swaps=$((swaps + 1))
  else swap_failures=$((swap_failures + 1)); fi
  i=$((1 - i))
done
wait "$lg"
echo "# under load: ${CLIENTS:-32} clients for ${SECONDS_UNDER_LOAD:-60} s, $swaps swaps done, $swap_failures failed"
cat "$work/loadgen.json"
[[ -s $work/loadgen.err ]] && head -3 "$work/loadgen.err"
[[ -s $work/swap.err ]] && head -3 "$work/swap.err"
echo "# burst: ${BURST:-24} clients at once, default queue depth"
"$tc" --socket "$sock" --json loadgen -c "${BURST:-24}" -r "${BURST:-24}" -n "${TOKENS:-64}" --raw 2>&1
