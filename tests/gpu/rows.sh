# rows.sh - the row runner of the first-run kit (tests/gpu/first_run.sh, which
# make gpu-check also runs; docs/backend-cuda.md, "The first GPU run").
# Sourced, not run.  A run writes exactly three files into its output folder,
# each appended and flushed as a row ends, so a run killed from outside (the
# device tool's limit) keeps every finished row:
#
#   table.txt      one line per row: name, verdict, seconds, result
#   logs.tar       each row's whole log, NAME.log, appended as the row ends
#   summary.jsonl  one JSON object per row: name, verdict, rc, ms, limit_s,
#                  result, figures (the row's key=value facts)
#
# rows_init OUTDIR DEADLINE_S   start a run: the overall deadline from now
# row NAME LIMIT_S FUNC [ARG]   run FUNC (an exported shell function) under
#                               min(LIMIT_S, what the deadline leaves); its
#                               stdout and stderr are the row's log; it
#                               writes its one-line result to $ROW_RESULT and
#                               key=value lines to $ROW_FIGS; its status: 0
#                               ok, 3 n/a (no GPU, or --dry), 4 info (a
#                               figure, no pass or fail), else FAIL.  A row
#                               that overruns is killed with its whole
#                               process group (timeout -k) and marked
#                               TIMEOUT; one the deadline leaves no time for
#                               is marked SKIPPED; the run goes on.
# rows_done                     the closing line; the table to stdout; the
#                               status: 0 when no row failed or timed out
# ROWS_ONLY=REGEX: rows whose names do not match are left out (not counted).
ROWS_FAILED=0
ROWS_N=0

# s as a JSON string (quotes, backslashes, control characters escaped)
rows_json_str() {
    local s=$1 out="" c i
    for ((i = 0; i < ${#s}; i++)); do
        c=${s:i:1}
        case $c in
        '"') out+='\"' ;;
        '\') out+='\\' ;;
        $'\n') out+='\n' ;;
        $'\t') out+='\t' ;;
        [[:cntrl:]]) out+=$(printf '\\u%04x' "'$c") ;;
        *) out+=$c ;;
        esac
    done
    printf '"%s"' "$out"
}

rows_now_ms() { echo $(($(date +%s%N) / 1000000)); }

rows_init() {
    ROWS_OUT=$1
    ROWS_DEADLINE_MS=$(($(rows_now_ms) + $2 * 1000))
    mkdir -p "$ROWS_OUT" || return 1
    rm -f "$ROWS_OUT/table.txt" "$ROWS_OUT/logs.tar" "$ROWS_OUT/summary.jsonl"
    ROWS_TMP=$(mktemp -d) || return 1
    export ROW_RESULT=$ROWS_TMP/result ROW_FIGS=$ROWS_TMP/figs
    printf '%-46s %-8s %9s  %s\n' row verdict seconds result >>"$ROWS_OUT/table.txt"
}

row() {
    local name=$1 limit=$2 fn=$3 left rc verdict t0 ms res figs="" k v first=1
    shift 3
    if [ -n "${ROWS_ONLY:-}" ] && ! [[ $name =~ $ROWS_ONLY ]]; then return 0; fi
    ROWS_N=$((ROWS_N + 1))
    : >"$ROW_RESULT"
    : >"$ROW_FIGS"
    left=$(((ROWS_DEADLINE_MS - $(rows_now_ms)) / 1000 - 1))
    t0=$(rows_now_ms)
    if [ "$left" -lt 2 ]; then
        rc=-1 verdict=SKIPPED
        echo "not started: the run's deadline leaves ${left} s" >"$ROWS_TMP/$name.log"
        echo "SKIPPED: the deadline" >"$ROW_RESULT"
    else
        [ "$limit" -gt "$left" ] && limit=$left
        # timeout makes itself a process group and kills the whole group
        timeout -k 5 "$limit" bash -c '"$@"' row "$fn" "$@" >"$ROWS_TMP/$name.log" 2>&1
        rc=$?
        case $rc in
        0) verdict=ok ;;
        3) verdict=n/a ;;
        4) verdict=info ;;
        124 | 137) verdict=TIMEOUT
            echo "TIMEOUT: killed at its limit of $limit s" >"$ROW_RESULT" ;;
        *) verdict=FAIL ;;
        esac
    fi
    ms=$(($(rows_now_ms) - t0))
    case $verdict in FAIL | TIMEOUT) ROWS_FAILED=$((ROWS_FAILED + 1)) ;; esac
    res=$(head -1 "$ROW_RESULT")
    [ -n "$res" ] || res="exit $rc (the log's last line: $(tail -1 "$ROWS_TMP/$name.log" | cut -c1-120))"
    printf '%-46s %-8s %9.1f  %s\n' "$name" "$verdict" "$(awk -v m="$ms" 'BEGIN {print m / 1000}')" \
        "$res" >>"$ROWS_OUT/table.txt"
    tar -C "$ROWS_TMP" -rf "$ROWS_OUT/logs.tar" "$name.log" && rm -f "$ROWS_TMP/$name.log"
    while IFS='=' read -r k v; do
        [ -n "$k" ] || continue
        [ $first = 1 ] || figs+=","
        first=0
        if [[ $v =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then
            figs+="$(rows_json_str "$k"):$v"
        else
            figs+="$(rows_json_str "$k"):$(rows_json_str "$v")"
        fi
    done <"$ROW_FIGS"
    printf '{"name":%s,"verdict":%s,"rc":%d,"ms":%d,"limit_s":%d,"result":%s,"figures":{%s}}\n' \
        "$(rows_json_str "$name")" "$(rows_json_str "$verdict")" "$rc" "$ms" "$limit" \
        "$(rows_json_str "$res")" "$figs" >>"$ROWS_OUT/summary.jsonl"
    echo "row $ROWS_N: $name: $verdict: $res" >&2
}

rows_done() {
    printf '%s: %d rows, %d failed or timed out\n' "${ROWS_TITLE:-rows}" "$ROWS_N" "$ROWS_FAILED" \
        >>"$ROWS_OUT/table.txt"
    cat "$ROWS_OUT/table.txt"
    rm -rf "$ROWS_TMP"
    [ "$ROWS_FAILED" = 0 ]
}
