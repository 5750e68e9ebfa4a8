#!/usr/bin/env bash
# The shipped test data against its SHA256SUMS (which name the uncompressed files: a .gz is checked
# by what it unpacks to). Usage: check_sums.sh DIR...
set -euo pipefail
for dir in "$@"; do
  while read -r want name; do
    if [[ -f $dir/$name ]]; then got=$(sha256sum <"$dir/$name")
    else got=$(gunzip -c "$dir/$name.gz" | sha256sum); fi
    got=${got%% *}
    [[ $got == "$want" ]] || { echo "$dir/$name: sha256 $got, SHA256SUMS says $want"; exit 1; }
    echo "ok $dir/$name"
  done <"$dir/SHA256SUMS"
done
