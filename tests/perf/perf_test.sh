#!/bin/sh
# hoop-perf run as a user runs it, its output checked.
#
#   perf_test.sh help PERF
#   perf_test.sh badflag PERF
#   perf_test.sh csv|json HOOPRUN PERF NRANKS ROWS COLLECTIVE [ARGS...]
#       --csv / --json output: the header, ROWS rows of COLLECTIVE, no wrong element, and
#       busbw = algbw x the bus factor of nccl-tests; the table ends with "0 OK"
#   perf_test.sh explain HOOPRUN PERF NRANKS ALGO SENT0 SENT1
#       traced all-reduce: the plan the library says for it, schedule lines sorted by step,
#       rank 0 sent/received SENT0 times the buffer, every other rank SENT1 times
#   perf_test.sh model HOOPRUN PERF NRANKS
#   perf_test.sh bound HOOPRUN PERF csv|json
#   perf_test.sh agg HOOPRUN PERF
#       -m N makes N calls per iteration in every -z mode: counted in the library's trace
#   perf_test.sh iter HOOPRUN PERF
#       -I/-K (per-iteration figures), -S (timestamps), -M (memory), -J and -z 3, in the table
#       and in the CSV and JSON files
#   perf_test.sh sym HOOPRUN PERF
#       --sym --bound: the buffers said to be symmetric, every element right, and the traffic of
#       the zero-copy all-reduce (2pS) above HOOP_SMALL_BYTES, the one step's at or under it;
#       with --rotate, no page fault in a timed call
set -u
mode=$1
shift
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    for f in "$tmp"/out "$tmp"/err; do [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done
    exit 1
}

# Runs hoop-perf on N ranks; the table goes to $tmp/out.
run_perf() {
    hooprun=$1 perf=$2 n=$3
    shift 3
    "$hooprun" --no-prefix --timeout 120 -n "$n" "$perf" "$@" >"$tmp/out" 2>"$tmp/err"
}

case $mode in
help)
    "$1" -h >"$tmp/out" 2>"$tmp/err" || fail "hoop-perf -h exited $?"
    grep -q '^usage: hoop-perf' "$tmp/out" || fail "no usage line"
    for c in allreduce broadcast reduce allgather gather scatter reducescatter alltoall sendrecv barrier; do
        grep -q "$c" "$tmp/out" || fail "-h does not mention $c"
    done
    # nccl-tests' flags that hoop-perf accepts, each explained in the help
    for f in -m -T -p -C -G -R -a -V -I -K -S -M -J; do
        grep -q "^  $f, --" "$tmp/out" || fail "-h does not explain $f"
    done
    "$1" --version >"$tmp/out" 2>"$tmp/err" || fail "hoop-perf --version exited $?"
    grep -q '^hoop-perf [0-9][0-9.]* (libhoop [0-9][0-9.]*)$' "$tmp/out" || fail "--version: $(cat "$tmp/out")"
    ;;
badflag)
    for args in "--no-such-flag" "-q" "-b" "-d float8" "-o xor" "-c 2" "-r x" "nocollective" "-b 2K -e 1K" \
        "-m 0" "-m 65536 -n 1000" "-T 0" "-p 2" "-C x" "-G 1" "-R 2" "--cudagraph 1" "-a 4" \
        "-z 4" "-I 2" "-K 1" "-I 1 -n 4 -K 4" "-S x" "-M 2" "-J"; do
        # shellcheck disable=SC2086
        "$1" $args >"$tmp/out" 2>"$tmp/err"
        rc=$?
        [ "$rc" -eq 2 ] || fail "hoop-perf $args exited $rc, expected 2"
        grep -q 'hoop-perf: ' "$tmp/err" || fail "hoop-perf $args: no message on stderr"
    done
    # The refusals say why in a sentence.
    "$1" -G 1 >"$tmp/out" 2>"$tmp/err"
    grep -q 'CUDA graphs are not supported' "$tmp/err" || fail "-G 1: $(cat "$tmp/err")"
    "$1" -R 1 >"$tmp/out" 2>"$tmp/err"
    grep -q 'registration is not supported' "$tmp/err" || fail "-R 1: $(cat "$tmp/err")"
    ;;
agg)
    # Calls on rank 0, as the trace numbers them: with -m 3 each of the 2 timed iterations of both
    # variants makes 2 calls more than with -m 1 (no warm-up, no check: nothing else changes).
    hooprun=$1 perf=$2
    for z in 0 1 2 3; do
        for m in 1 3; do
            HOOP_TRACE=1 "$hooprun" --timeout 60 -n 2 "$perf" -b 64 -e 64 -n 2 -w 0 -c 0 -m $m -z $z \
                >"$tmp/out" 2>"$tmp/err" || fail "-m $m -z $z: exit status $?"
            grep -o "0 trace allreduce#[0-9]*" "$tmp/out" "$tmp/err" | sed 's/.*#//' | sort -u >"$tmp/calls$m"
        done
        a=$(wc -l <"$tmp/calls1") b=$(wc -l <"$tmp/calls3")
        [ "$a" -gt 0 ] || fail "-z $z: no trace lines"
        [ $((b - a)) -eq 8 ] || fail "-z $z: $a all-reduces with -m 1, $b with -m 3 (expected 8 more)"
    done
    ;;
iter)
    command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
    hooprun=$1 perf=$2
    run_perf "$hooprun" "$perf" 3 -b 1K -e 16K -f 4 -n 12 -w 1 -I 1 -K 2 -S 1 -M 1 -z 3 -m 2 \
        -J "$tmp/rows.json" || fail "exit status $?"
    grep -q '^# -z 3: a barrier after each iteration (not timed)$' "$tmp/out" || fail "no -z 3 line"
    grep -q '^# -I: i_\* per call' "$tmp/out" || fail "no -I line"
    grep -q '^#   Initialization  resident' "$tmp/out" || fail "no -M report"
    grep -q '^# *size .* i_min  *i_max  *i_p99  *i_cv  *ip_min .* timestamp$' "$tmp/out" || fail "no -I/-S columns"
    run_perf "$hooprun" "$perf" 2 -b 1K -e 4K -f 4 -n 5 -w 1 -I 1 -S 1 --csv "$tmp/rows.csv" ||
        fail "exit status $?"
    python3 - "$tmp/rows.json" "$tmp/rows.csv" <<'PY' || fail "per-iteration check"
import csv, json, re, sys
doc = json.load(open(sys.argv[1]))
assert doc["ok"] and doc["per_iter_timing"] == 1 and doc["per_iter_skip"] == 2, doc
assert doc["blocking"] == 3 and doc["agg_iters"] == 2, doc
m = doc["memory"]
assert m["user_bytes"] > 0 and m["init_fds"] >= 0, m
rows = doc["rows"] + list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == 3 + 2, len(rows)
for r in rows:
    assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["timestamp"]), r
    for v in ("oop", "ip"):
        x = {k: float(r["%s_i_%s" % (v, k)]) for k in
             ("min_us", "p50_us", "p95_us", "p99_us", "max_us", "avg_us", "cv_pct")}
        x = {k.split("_")[0]: y for k, y in x.items()}
        x["cv_pct"] = x.pop("cv")
        assert 0 < x["min"] <= x["p50"] <= x["p95"] <= x["p99"] <= x["max"], (r, x)
        assert x["min"] <= x["avg"] <= x["max"] and x["cv_pct"] >= 0, x
PY
    ;;
csv | json)
    hooprun=$1 perf=$2 n=$3 rows=$4 coll=$5
    shift 5
    if [ "$mode" = json ]; then
        command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
        run_perf "$hooprun" "$perf" "$n" "$coll" --json "$tmp/rows" "$@" || fail "exit status $?"
    else
        run_perf "$hooprun" "$perf" "$n" "$coll" --csv "$tmp/rows" "$@" || fail "exit status $?"
    fi
    grep -q '^# Out of bounds values : 0 OK$' "$tmp/out" || fail "no '0 OK' footer"
    # The header names what ran: the --algo given (a list too), -m, and -a (the mean by default).
    want_algo=auto want_agg=1 want_avg=mean prev=
    for a in "$@"; do
        case $prev in
        --algo) want_algo=$a ;;
        -m) want_agg=$a ;;
        -a) want_avg=$(echo "rank 0,mean,min,max" | cut -d, -f$((a + 1))) ;;
        esac
        prev=$a
    done
    grep -q "algorithm: $want_algo\( (one sweep each)\)\?$" "$tmp/out" || fail "header: not algorithm: $want_algo"
    grep -q " agg iters: $want_agg .* time: $want_avg over ranks$" "$tmp/out" || fail "header: not agg iters $want_agg, $want_avg"
    table=$(grep -c '^ *[0-9]' "$tmp/out")
    [ "$table" -eq "$rows" ] || fail "$table table rows, expected $rows"
    if [ "$mode" = json ]; then
        python3 - "$tmp/rows" "$rows" "$coll" "$n" <<'PY' || fail "JSON check"
import json, sys
doc = json.load(open(sys.argv[1]))
rows, coll, n = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
assert doc["ranks"] == n and doc["collective"] == coll and doc["ok"] is True, doc
assert doc["out_of_bounds"] == 0, doc["out_of_bounds"]
assert len(doc["rows"]) == rows, len(doc["rows"])
keys = ["collective", "algo", "transport", "ranks", "size_bytes", "count", "type", "redop",
        "root", "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong", "ip_time_us", "ip_algbw",
        "ip_busbw", "ip_wrong"]
for r in doc["rows"]:
    assert list(r) == keys, list(r)
    assert r["collective"] == coll and r["ranks"] == n, r
    assert r["oop_wrong"] in (0, None) and r["ip_wrong"] in (0, None), r
PY
        exit 0
    fi
    awk -F, -v rows="$rows" -v coll="$coll" -v n="$n" '
        NR == 1 {
            want = "collective,algo,transport,ranks,size_bytes,count,type,redop,root," \
                   "oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong"
            if ($0 != want) { print "bad header: " $0; bad = 1 }
            next
        }
        {
            if (NF != 17) { print "line " NR ": " NF " fields"; bad = 1 }
            if ($1 != coll || $4 != n) { print "line " NR ": " $0; bad = 1 }
            if (($13 != "0" && $13 != "") || ($17 != "0" && $17 != "")) {
                print "line " NR ": wrong elements: " $0; bad = 1
            }
            if (coll == "allreduce") f = 2 * (n - 1) / n
            else if (coll == "broadcast" || coll == "reduce" || coll == "sendrecv") f = 1
            else if (coll == "barrier") f = -1
            else f = (n - 1) / n
            for (c = 10; c <= 14; c += 4) {
                if ($c == "") continue
                # algbw = size / time (GB/s from bytes and microseconds); busbw = algbw x factor
                alg = $(c + 1); bus = $(c + 2)
                if (f < 0) { if (alg != "" || bus != "") { print "barrier with bandwidth"; bad = 1 } continue }
                if ($c > 0 && alg >= 0.01) {
                    want = $5 / ($c * 1000)
                    # The time is printed rounded: below a microsecond its last digit alone is
                    # more than 0.1 %, so allow what that rounding can make.
                    dec = index($c, ".") > 0 ? length($c) - index($c, ".") : 0
                    tol = 0.5 / (10 ^ dec) / $c * 1.05
                    if (tol < 1e-3) tol = 1e-3
                    if ((alg - want) / want > tol || (want - alg) / want > tol) {
                        print "line " NR ": algbw " alg ", expected " want; bad = 1
                    }
                    if ((bus - alg * f) > 1e-3 * bus || (alg * f - bus) > 1e-3 * bus) {
                        print "line " NR ": busbw " bus " is not " f " x algbw " alg; bad = 1
                    }
                }
            }
        }
        END {
            if (NR - 1 != rows) { print NR - 1 " rows, expected " rows; bad = 1 }
            exit bad
        }' "$tmp/rows" || fail "CSV check"
    ;;
explain)
    hooprun=$1 perf=$2 n=$3 algo=$4 x0=$5 x1=$6
    run_perf "$hooprun" "$perf" "$n" --explain -b 4K --algo "$algo" || fail "exit status $?"
    grep -q '^# Out of bounds values : 0 OK$' "$tmp/out" || fail "no '0 OK' footer"
    # The library's plan, and why: the algorithm --algo forced, point to point.
    grep -qx "# plan: p2p $algo (HOOP_ALGO=$algo)" "$tmp/out" || fail "plan: $(grep '^# plan' "$tmp/out")"
    # The schedule: lines "[rank R] allreduce#C ALGO step K: ...", K never decreasing.
    awk -v algo="$algo" -v n="$n" '
        /^\[rank [0-9]+\] allreduce#[0-9]+ / {
            if ($4 != algo && $4 != algo ":") { print "algorithm " $4 ", expected " algo; bad = 1 }
            if ($5 == "step") {
                k = $6 + 0
                if (k < last) { print "step " k " after step " last; bad = 1 }
                last = k; steps++
                seen[$2]++
            }
        }
        END {
            if (steps == 0) { print "no step lines"; bad = 1 }
            for (r = 0; r < n; r++) if (!(r "]" in seen)) { print "no step of rank " r; bad = 1 }
            exit bad
        }' "$tmp/out" || fail "schedule"
    # The traffic table: "  R  SENT  Xx  RECEIVED  Xx  MSGS  MSGS".
    awk -v n="$n" -v x0="$x0" -v x1="$x1" '
        /^# traffic/ { on = 1; next }
        on && $1 ~ /^[0-9]+$/ {
            x = ($1 == 0 ? x0 : x1)
            if ($3 != x "x" || $5 != x "x") { print "rank " $1 ": " $3 " / " $5 ", expected " x "x"; bad = 1 }
            if ($2 != x * 4096 || $4 != x * 4096) { print "rank " $1 ": " $2 " / " $4 " bytes"; bad = 1 }
            ranks++
        }
        END { if (ranks != n) { print ranks " ranks in the traffic table"; bad = 1 } exit bad }' \
        "$tmp/out" || fail "traffic"
    ;;
bound)
    # --bound with cache-cold buffers on 2 ranks: the table says how the buffers were used and the
    # copy rate; every row of --csv / --json has the traffic of the area's all-reduce, (5p-1)S = 9S
    # at p = 2, and fractions that agree with traffic / (2 x rate) / time, above 0. How large they
    # are is a measurement (docs/performance.md), not checked here: a loaded machine moves both
    # the copy rate and the rows.
    hooprun=$1 perf=$2 fmt=$3
    command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
    run_perf "$hooprun" "$perf" 2 allreduce -b 4M -e 16M -f 4 -n 5 -w 1 --bound --rotate 256M \
        "--$fmt" "$tmp/rows" || fail "exit status $?"
    grep -q '^# Out of bounds values : 0 OK$' "$tmp/out" || fail "no '0 OK' footer"
    grep -q '^# buffers: rotated over 268435456 bytes per rank' "$tmp/out" || fail "no buffers line"
    rate=$(sed -n 's/^# copy rate: \([0-9.]*\) GB\/s, all 2 ranks copying.*/\1/p' "$tmp/out")
    [ -n "$rate" ] || fail "no measured copy rate in the header"
    python3 - "$fmt" "$tmp/rows" "$rate" <<'PY' || fail "bound check"
import csv, json, sys
fmt, path, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
if fmt == "json":
    doc = json.load(open(path))
    assert doc["buffers"] == "rotated" and doc["rotate_bytes"] == 256 << 20, doc
    assert doc["copy_rate_measured"] is True and abs(doc["copy_rate_gbs"] - rate) < 0.01, doc
    rows = doc["rows"]
else:
    rows = list(csv.DictReader(open(path)))
assert len(rows) == 2, len(rows)
for r in rows:
    size = int(r["size_bytes"])
    assert r["buffers"] == "rotated", r
    for v in ("oop", "ip"):
        traffic, frac, t = float(r[v + "_traffic_bytes"]), float(r[v + "_bound"]), float(r[v + "_time_us"])
        assert traffic == 9 * size, (v, traffic, size)
        want = traffic / (2 * rate * 1e9) / (t * 1e-6)
        assert abs(frac - want) <= 0.02 * want + 1e-3, (v, frac, want)
        assert 0 < frac, (v, frac, r)
        # the pools were written before timing: no timed call takes a page fault
        assert float(r[v + "_faults_per_call"]) < 16, (v, r)
PY
    # Without --bound: nccl-tests' 17 columns, and the buffers said to be cache-hot.
    run_perf "$hooprun" "$perf" 2 allreduce -b 1K -e 1K -n 2 -w 1 --csv "$tmp/rows" || fail "exit status $?"
    grep -q '^# buffers: cache-hot' "$tmp/out" || fail "no cache-hot line"
    [ "$(head -n 1 "$tmp/rows" | tr ',' '\n' | wc -l)" -eq 17 ] || fail "columns without --bound"
    # --traffic states every model with its formula.
    "$perf" --traffic >"$tmp/out" 2>"$tmp/err" || fail "--traffic exited $?"
    grep -q '^allreduce/area  *(5p-1)S' "$tmp/out" || fail "--traffic: no all-reduce model"
    ;;
sym)
    hooprun=$1 perf=$2
    command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
    run_perf "$hooprun" "$perf" 2 allreduce -b 8K -e 2M -f 16 -n 3 -w 1 -c 1 --sym --bound \
        -d float32 -o all --csv "$tmp/rows" || fail "exit status $?"
    grep -q '^# Out of bounds values : 0 OK$' "$tmp/out" || fail "no '0 OK' footer"
    grep -q '^# buffers: symmetric memory' "$tmp/out" || fail "no symmetric buffers line"
    python3 - "$tmp/rows" <<'PY' || fail "sym traffic check"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 15, len(rows)
for r in rows:
    size = int(r["size_bytes"])
    for v in ("oop", "ip"):
        traffic = float(r[v + "_traffic_bytes"])
        want = 4 * size if size > 16384 else 10 * size
        assert traffic == want, (v, traffic, size)
PY
    "$perf" --traffic >"$tmp/out" 2>"$tmp/err" || fail "--traffic exited $?"
    grep -q '^allreduce/sym  *2pS' "$tmp/out" || fail "--traffic: no zero-copy model"
    # Cache-cold symmetric buffers are cold in the cache only: a rank's first touch of a peer's
    # page through its own mapping is a page fault (hundreds a call at 4 MiB), which an untimed
    # call on every set takes before timing.
    run_perf "$hooprun" "$perf" 2 allreduce -b 4M -e 4M -n 4 -w 1 --sym --rotate 64M \
        --csv "$tmp/rows" || fail "exit status $? (--rotate)"
    grep -q '^# Out of bounds values : 0 OK$' "$tmp/out" || fail "no '0 OK' footer (--rotate)"
    python3 - "$tmp/rows" <<'PY' || fail "page faults in timed calls on rotated symmetric buffers"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1 and rows[0]["buffers"] == "rotated", rows
for v in ("oop", "ip"):
    assert float(rows[0][v + "_faults_per_call"]) < 16, (v, rows[0])
PY
    ;;
model)
    hooprun=$1 perf=$2 n=$3
    run_perf "$hooprun" "$perf" "$n" --model -b 8 -e 64K -f 64 -n 2 -w 1 || fail "exit status $?"
    for v in alpha beta gamma; do
        grep -q "^# $v " "$tmp/out" || fail "no $v line"
    done
    awk '
        /^# alpha/ { if (!($4 > 0)) { print "alpha " $4; bad = 1 } }
        /^ *[0-9]/ {
            rows++
            if (NF != 9 || $9 != "0") { print "row: " $0; bad = 1 }
            for (i = 4; i <= 7; i++) if (!($i > 0)) { print "prediction " $i; bad = 1 }
        }
        END { if (rows != 3) { print rows " rows, expected 3"; bad = 1 } exit bad }' \
        "$tmp/out" || fail "model table"
    ;;
*)
    echo "unknown mode $mode"
    exit 2
    ;;
esac
exit 0
