# lib.sh - the harness the end-to-end scripts share (sourced, never run):
# the repository root as the working directory ($root), a scratch directory
# removed on exit ($tmp), and the pass/fail counters with `ok WHAT` and
# `bad WHAT`; a failure shows the last E2E_LOG_LINES (20) lines of $tmp/log.
# A script resolves its arguments' paths before sourcing it (it cd's).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass+1)); echo "PASS $1"; }
bad() {
    fail=$((fail+1))
    echo "FAIL $1"
    [ -f "$tmp/log" ] && tail -"${E2E_LOG_LINES:-20}" "$tmp/log" | sed 's/^/    /'
    return 0
}
