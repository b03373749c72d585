#!/usr/bin/env bash
# git_scale.sh — does the harness's cost grow with the size of the git repository it works in?
#
# Run manually from anywhere in the repository (not part of CI; the release build takes minutes):
#
#     tests/bench/git_scale.sh            # 15 measured runs per repository (RUNS=N to change)
#
# What it does:
#   1. `cargo build --release -p dsh -p dsh-test-support --bins` (honours CARGO_TARGET_DIR);
#      BIN_DIR=/path/to/dir skips the build and uses the dsh / dsh-replay-server found there.
#      EXEC_ARGS="-c plugins.dsh-context.git_status_max_files=100000" passes options to every
#      `dsh exec` (word-split; e.g. to measure one full `git status` per turn in the large tree).
#   2. Creates two committed git repositories in a temporary directory: "small" (10 files) and
#      "large" (FILES files, default 50,000: the same 10 at the top plus 100 per subdirectory;
#      generation takes a few seconds). Each index is refreshed after a 1 s pause, so no entry
#      is "racily clean" (which would make every `git status` re-read file contents) — as in a
#      repository that was not committed a moment ago.
#   3. Starts `dsh-replay-server --stateless` on 127.0.0.1 with the 10-step task of
#      exec_bench.sh: nine `read` calls (relative paths, so one script serves both repositories),
#      then an answer.
#   4. Runs `dsh exec` (text mode, persistence on, a temporary $DSH_HOME per repository) in each
#      repository: one warm-up each, then RUNS measured runs, alternating small and large so
#      load drift hits both alike. Prints medians of wall time (ms, $EPOCHREALTIME) and CPU time
#      (user+sys ms of the run's whole process tree, git children included: bash's `times`), and
#      the large/small ratios. Target (issue 13): large within 1.2× of small.
#   5. One more run per repository with a logging `git` wrapper first on PATH, to report how
#      many git processes one run spawns and which (not timed).
#
# Requirements: bash ≥ 5 (EPOCHREALTIME), git, cargo. Never touches the network beyond
# 127.0.0.1; the API key is a dummy.
set -euo pipefail

RUNS="${RUNS:-15}"
FILES="${FILES:-50000}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="${BIN_DIR:-$TARGET_DIR/release}"

if [[ -z "${BIN_DIR:-}" ]]; then
  echo "building release binaries (target dir $TARGET_DIR) ..." >&2
  (cd "$ROOT" && cargo build --release --quiet -p dsh -p dsh-test-support --bins)
fi

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
WORK="$(cd "$WORK" && pwd -P)"

export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
G=(git -c user.name=bench -c user.email=bench@example.invalid -c init.defaultBranch=main -c commit.gpgsign=false)

# make_repo DIR NFILES
make_repo() {
  local dir="$1" n="$2" i d f
  mkdir -p "$dir"
  for i in 1 2 3 4 5 6 7 8 9 10; do
    printf 'file %s\nline two\nline three\n' "$i" > "$dir/f$i.txt"
  done
  local rest=$(( n - 10 )) made=0
  d=0
  while (( made < rest )); do
    mkdir -p "$dir/d$d"
    for (( f = 0; f < 100 && made < rest; f++ )); do
      printf 'dir %s file %s\n' "$d" "$f" > "$dir/d$d/f$f.txt"
      made=$(( made + 1 ))
    done
    d=$(( d + 1 ))
  done
  "${G[@]}" -C "$dir" init -q
  "${G[@]}" -C "$dir" add -A
  "${G[@]}" -C "$dir" commit -q -m "bench tree"
}

t0="${EPOCHREALTIME/./}"
make_repo "$WORK/small" 10
make_repo "$WORK/large" "$FILES"
sleep 1
for r in small large; do "${G[@]}" -C "$WORK/$r" update-index -q --really-refresh; done
t1="${EPOCHREALTIME/./}"
echo "repositories generated in $(( (t1 - t0) / 1000 )) ms (small: $("${G[@]}" -C "$WORK/small" ls-files | wc -l) files, large: $("${G[@]}" -C "$WORK/large" ls-files | wc -l) files)" >&2

{
  printf '['
  for i in 1 2 3 4 5 6 7 8 9; do
    printf '{"tool_calls":[["read",{"file_path":"f%s.txt"}]]},' "$i"
  done
  printf '{"text":"All nine files hold three lines."}]\n'
} > "$WORK/ten.json"

"$BIN/dsh-replay-server" "$WORK/ten.json" --port 0 --stateless > "$WORK/server.out" 2> "$WORK/server.err" &
SERVER_PID=$!
for _ in $(seq 1 200); do
  if [[ -s "$WORK/server.out" ]]; then break; fi
  sleep 0.05
done
URL="$(head -n 1 "$WORK/server.out")"
if [[ "$URL" != http://127.0.0.1:* ]]; then
  echo "replay server did not start: $(cat "$WORK/server.err")" >&2
  exit 1
fi

to_us() { # "0m0.123s" → microseconds
  local v="$1" m s
  m="${v%%m*}"
  s="${v#*m}"
  s="${s%s}"
  awk -v m="$m" -v s="$s" 'BEGIN { printf "%d", (m * 60 + s) * 1000000 }'
}

# measure_once REPO [PATH-PREFIX] → appends "wall_us cpu_us" to $WORK/REPO.samples
measure_once() {
  local repo="$1" prefix="${2:-}" t0 t1 line user sys
  mkdir -p "$WORK/home-$repo"
  t0="${EPOCHREALTIME/./}"
  (
    cd "$WORK/$repo"
    PATH="$prefix$PATH" DSH_HOME="$WORK/home-$repo" DEEPSEEK_BASE_URL="$URL" DEEPSEEK_API_KEY=bench-dummy-key \
      "$BIN/dsh" exec ${EXEC_ARGS:-} "summarize the files" > "$WORK/out.txt" 2> "$WORK/err.txt" || {
      echo "run failed in $repo (see below)" >&2
      cat "$WORK/err.txt" >&2
      exit 1
    }
    times > "$WORK/times.txt"
  )
  t1="${EPOCHREALTIME/./}"
  grep -q "three lines" "$WORK/out.txt" || { echo "unexpected answer: $(cat "$WORK/out.txt")" >&2; exit 1; }
  line="$(sed -n 2p "$WORK/times.txt")" # children: user sys
  user="$(to_us "${line%% *}")"
  sys="$(to_us "${line##* }")"
  echo "$(( t1 - t0 )) $(( user + sys ))" >> "$WORK/$repo.samples"
}

median_col() { # FILE COLUMN
  sort -n -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'
}

measure_once small
measure_once large
: > "$WORK/small.samples"
: > "$WORK/large.samples"
for _ in $(seq 1 "$RUNS"); do
  measure_once small
  measure_once large
done

# One counted run per repository through a logging git wrapper (not timed).
mkdir -p "$WORK/wrap"
REAL_GIT="$(command -v git)"
printf '#!/bin/sh\nprintf "%%s\\n" "$*" >> "%s/git.log"\nexec "%s" "$@"\n' "$WORK" "$REAL_GIT" > "$WORK/wrap/git"
chmod 755 "$WORK/wrap/git"
declare -A GITS
for r in small large; do
  : > "$WORK/git.log"
  measure_once "$r" "$WORK/wrap:"
  GITS[$r]="$(wc -l < "$WORK/git.log") ($(sed -E 's/^-C [^ ]+ //; s/^([a-z-]+).*/\1/' "$WORK/git.log" | sort | uniq -c | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }'))"
done

ms() { awk -v u="$1" 'BEGIN { printf "%.1f", u / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
SW="$(median_col "$WORK/small.samples" 1)"
SC="$(median_col "$WORK/small.samples" 2)"
LW="$(median_col "$WORK/large.samples" 1)"
LC="$(median_col "$WORK/large.samples" 2)"

echo
echo "10-step dsh exec (9 reads, answer) in a git repository — medians of $RUNS runs ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "| repository | wall ms | CPU ms (user+sys, git included) | git processes per run |"
echo "|---|---:|---:|---|"
echo "| small (10 files) | $(ms "$SW") | $(ms "$SC") | ${GITS[small]} |"
echo "| large ($FILES files) | $(ms "$LW") | $(ms "$LC") | ${GITS[large]} |"
echo "| large / small | $(ratio "$LW" "$SW")× | $(ratio "$LC" "$SC")× | — |"
echo
echo "target: large within 1.2× of small"
