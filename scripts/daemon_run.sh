# Sourced by the scripts that run tandemd from a build folder (gpu_swap_run.sh, gpu_http_run.sh,
# gpu_sandbox_check.sh): the build's binaries, a work folder with the socket path that goes at
# exit together with every process put in `pids`, and the wait for a resident model.
# In: build (the build folder), run_name (the script's name, for messages and the work folder).
if [[ -d .devdeps ]]; then
  export LD_LIBRARY_PATH=$PWD/.devdeps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
fi
tm=$build/client/tandem_model/tandem-model td=$build/daemon/tandemd tc=$build/client/tandem/tandem
th=$build/client/tandem_http/tandem-http

# Exits when one of the named files is missing.
need_files() {
  for f in "$@"; do [[ -e $f ]] || { echo "$run_name: $f is missing (build it in $build)" >&2; exit 1; }; done
}

work=$(mktemp -d "/tmp/tandem-$run_name.XXXXXX") sock=$work/tandemd.sock
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# Whether tandemd on $sock lists a resident model; wait_resident polls that for up to $1 seconds
# (the output, not the exit status, tells: under pipefail a client that fails after printing
# would otherwise keep the loop waiting).
resident() { [[ $("$tc" --socket "$sock" --json models 2>/dev/null) == *'"resident"'* ]]; }
wait_resident() {
  for _ in $(seq $((5 * ${1:-120}))); do resident && return 0; sleep 0.2; done
  resident
}
