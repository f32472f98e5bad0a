#!/usr/bin/env bash
# bench/test_times.sh — wall and CPU time of every test binary `cargo test` runs.
#
#   bench/test_times.sh [OUT.tsv] [-- extra test-binary args, e.g. --test-threads 4]
#
# Builds the tests (`cargo test --no-run`), then runs each test binary the way
# `cargo test` does (from the package's directory, TESSERA_REQUIRE_REDIS=1),
# one after the other, under /usr/bin/time. CPU time is user+sys of the test
# process *and* of every server it started and reaped (a Server's Drop waits
# on its child, so the children's rusage lands in the parent's), so
# cpu/wall tells a binary that computes (near the core count) from one that
# waits (well below 1). Prints a table sorted by wall time and writes the
# raw rows to OUT.tsv (default /tmp/test_times.tsv):
#   binary  wall_s  user_s  sys_s  cpu/wall  result
# Env: TT_FILTER (an extended regex: only binaries whose name matches),
# TT_SKIP (an extended regex: not the binaries whose name matches),
# TT_LOGS (a directory: keep every binary's output there as NAME.log, e.g. for
# per-test times), RUST_TEST_THREADS (passed through, as cargo test does).
# Per-test times (libtest's --report-time is unstable, hence RUSTC_BOOTSTRAP):
#   RUSTC_BOOTSTRAP=1 TT_LOGS=/tmp/tt bench/test_times.sh /tmp/t.tsv -- \
#     -Z unstable-options --report-time
#   grep -h 'ok <' /tmp/tt/*.log | sed 's/^test \(.*\) \.\.\. ok <\(.*\)s>/\2 \1/' | sort -rn
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/test_times.tsv}
shift || true
[ "${1:-}" = "--" ] && shift
extra=("$@")

export TESSERA_REQUIRE_REDIS=1
bins=$(cargo test --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        t = m["target"]
        kind = t["kind"][0]
        root = m["manifest_path"].rsplit("/", 1)[0]
        print("%s:%s\t%s\t%s" % (t["name"], kind, root, m["executable"]))
')
filter=${TT_FILTER:-.}
: >"$out"
while IFS=$'\t' read -r name root exe; do
  [[ $name =~ $filter ]] || continue
  [ -n "${TT_SKIP:-}" ] && [[ $name =~ $TT_SKIP ]] && continue
  log=$(mktemp)
  # %e wall, %U user, %S sys: of the test process and its reaped children.
  if (cd "$root" && /usr/bin/time -f '%e %U %S' -o "$log.time" "$exe" "${extra[@]}" >"$log" 2>&1); then
    res=ok
  else
    res=FAILED
  fi
  # A failed run adds "Command exited with non-zero status N" first.
  read -r wall user sys < <(tail -1 "$log.time")
  passed=$(grep -o '[0-9]* passed' "$log" | awk '{s+=$1} END {print s+0}')
  ratio=$(awk -v w="$wall" -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", (w > 0 ? (u + s) / w : 0)}')
  printf '%s\t%s\t%s\t%s\t%s\t%s (%s tests)\n' "$name" "$wall" "$user" "$sys" "$ratio" "$res" "$passed" | tee -a "$out"
  [ "$res" = ok ] || cp "$log" "$out.$name.log"
  if [ -n "${TT_LOGS:-}" ]; then mkdir -p "$TT_LOGS" && cp "$log" "$TT_LOGS/${name//:/_}.log"; fi
  rm -f "$log" "$log.time"
done <<<"$bins"

echo
echo "sorted by wall time (s):  binary  wall  user  sys  cpu/wall  result"
sort -t$'\t' -k2,2 -rn "$out" | column -t -s$'\t'
awk -F'\t' '{w+=$2; c+=$3+$4} END {printf "total: wall %.0f s, cpu %.0f s\n", w, c}' "$out"
