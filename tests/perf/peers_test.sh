#!/bin/sh
# bench/vs-peers.sh in its --quick mode, its output checked: every run's CSV in hoop-perf's columns
# with bus bandwidths that follow nccl-tests' factors and no wrong element, for hoop and for every
# peer found here (Open MPI, gloo), and tables whose every row is well formed.
#
#   peers_test.sh VS_PEERS_SH BUILD_DIR
#
# Exit 77 (skipped) when neither mpirun nor torch is here; with one of them, the other is left out.
set -u
vs=$1 build=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    for f in "$tmp/report" "$tmp/err"; do [ -f "$f" ] && { echo "--- $f"; tail -n 60 "$f"; }; done
    exit 1
}

python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
peers=""
if command -v mpirun >/dev/null 2>&1; then
    peers=ompi-shm,ompi-tcp
else
    echo "no mpirun: Open MPI left out (apt-get install openmpi-bin libopenmpi-dev)"
fi
if "$python" -c 'import torch.distributed as d; assert d.is_gloo_available()' >/dev/null 2>&1; then
    peers=${peers:+$peers,}gloo
else
    echo "no torch with gloo in $python: gloo left out (apt-get install python3-torch)"
fi
[ -n "$peers" ] || { echo "SKIP: neither mpirun nor torch is installed"; exit 77; }

sh "$vs" --quick -c all --peers "$peers" -o "$tmp/out" "$build" >"$tmp/report" 2>"$tmp/err" ||
    fail "vs-peers.sh --quick exited $?"

# The raw CSV files: per library, rows in hoop-perf's columns, checked, none wrong.
libs="hoop-tcp"
grep -q '^hoop=.*shm' "$tmp/out/meta" && libs="$libs hoop-shm"
case ",$peers," in *,ompi-shm,*) libs="$libs ompi-shm ompi-tcp" ;; esac
case ",$peers," in *,gloo,*) libs="$libs gloo" ;; esac
for lib in $libs; do
    colls="allreduce broadcast allgather reduce"
    [ "$lib" = gloo ] && colls=allreduce # gloo_coll.py starts torch: slow; the rest in full runs
    for coll in $colls; do
        for part in lat small; do
            [ "$part" = lat ] && [ "$coll" != allreduce ] && continue
            f=$tmp/out/raw/n2/$coll/$lib.$part.1.csv
            [ -s "$f" ] || fail "no rows from $lib $coll ($part): $f"
            awk -F, -v f="$f" -v coll="$coll" '
                NR == 1 {
                    want = "collective,algo,transport,ranks,size_bytes,count,type,redop,root," \
                           "oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong"
                    if ($0 != want) { print f ": header " $0; bad = 1 }
                    next
                }
                {
                    rows++
                    if (NF != 17 || $1 != coll || $4 != 2 || $7 != "float32") { print f ": row " $0; bad = 1 }
                    factor = coll == "allreduce" ? 1 : coll == "allgather" ? 0.5 : 1
                    used = 0
                    for (c = 10; c <= 14; c += 4) {
                        if ($c == "") continue
                        used++
                        if ($(c + 3) != "0") { print f ": wrong elements (or unchecked): " $0; bad = 1 }
                        if ($c > 0 && $(c + 1) >= 0.01) {
                            alg = $5 / ($c * 1000)
                            # The time is printed rounded (0.317 us for 0.3166): half its last
                            # digit, relative, on top of the algbw digits 1e-3 allows.
                            tol = 1e-3
                            dot = index($c, ".")
                            if (dot > 0) tol += 0.5 * 10 ^ -(length($c) - dot) / $c
                            if ((alg - $(c + 1)) / alg > tol || ($(c + 1) - alg) / alg > tol) {
                                print f ": algbw " $(c + 1) " is not size/time " alg; bad = 1
                            }
                            bus = $(c + 1) * factor
                            if ((bus - $(c + 2)) > 1e-3 * bus || ($(c + 2) - bus) > 1e-3 * bus) {
                                print f ": busbw " $(c + 2) " is not " factor " x algbw"; bad = 1
                            }
                        }
                    }
                    if (used == 0) { print f ": no figures: " $0; bad = 1 }
                }
                END { if (rows == 0) { print f ": no rows"; bad = 1 } exit bad }' "$f" ||
                fail "$f"
        done
    done
done

# The tables: a title, a header, rows of "SIZE UNIT  hoop [lo-hi]  peer [lo-hi]  RATIO  TARGET
# VERDICT", the latency line of all-reduce, and "#wrong:" with zeros only.
grep -q '^# verdicts: [0-9]* PASS, [0-9]* MISS' "$tmp/report" || fail "no verdict line"
! grep -q '^# ERROR' "$tmp/report" || fail "the report names errors"
expect="all-reduce, 2 ranks: hoop tcp vs"
case ",$peers," in *,ompi-tcp,*) grep -q "^== $expect Open MPI tcp" "$tmp/report" || fail "no tcp table" ;; esac
case ",$peers," in *,gloo,*) grep -q "^== $expect gloo" "$tmp/report" || fail "no gloo table" ;; esac
case " $libs " in *" hoop-shm"*" ompi-shm "*)
    grep -q "^== all-reduce, 2 ranks, .* against this machine's limits$" "$tmp/report" ||
        fail "no table against the machine's limits" ;;
esac
awk '
    # The 2-rank shm table against this machine (limits): free-form lines, each of a known shape.
    /^== .*against this machine.s limits$/ { inlim = 1; limits++; next }
    inlim && /^ *$/ {
        if (oneway != 1 || copy != 1) { print "limits table: " oneway " one-way lines, " copy " copy lines"; bad = 1 }
        inlim = 0; next
    }
    inlim {
        r = " \\[[0-9.]+-[0-9.]+\\]"
        if ($0 ~ "^   a cache line one way between the two CPUs: [0-9.]+ ns" r " \\(line-pingpong\\)$") oneway++
        else if ($0 ~ "^   two processes copying [0-9]+ (B|KiB|MiB|GiB) each at once \\(mem-copy\\): [0-9.]+ GB/s per process" r "\\. An$") copy++
        else if ($0 ~ /^   (the smallest all-reduce, two threads|out-of-place all-reduce out of cache|once, such a copy|bus bandwidth as a fraction of it$|\(no 8 B row back to back)/) ;
        else if ($0 ~ "^   it: [0-9.]+ ns" r " \\(line-pingpong\\)$") ;
        else if ($0 ~ /^   8 B back to back, (hoop|ompi)-shm: [0-9.]+ us = [0-9.]+x the line.s one-way time/) ;
        else if ($0 ~ /^ +size +hoop +fraction +peer +fraction$/) ;
        else if (NF == 6 && $1 ~ /^[0-9]+$/ && $2 ~ /^(B|KiB|MiB|GiB)$/ && $3 $4 $5 $6 ~ /^[0-9.-]+$/) ;
        else { print "limits table line: " $0; bad = 1 }
        next
    }
    /^== / { intable = 1; tables++; rows = 0; next }
    intable && /^ *$/ {
        if (rows != 3) { print "table " tables ": " rows " rows, expected 3 (4K, 16K, 64K)"; bad = 1 }
        intable = 0; next
    }
    !intable { next }
    /^   bus bandwidth|^   tcp-stream|^ +size / { next }
    /latency \(us, call \+ barrier\)/ {
        if ($0 !~ /hoop [0-9.]+ \[[0-9.]+-[0-9.]+\], peer [0-9.]+ \[[0-9.]+-[0-9.]+\], hoop\/peer [0-9.]+x/) {
            print "latency line: " $0; bad = 1
        }
        lat++; next
    }
    /#wrong:/ {
        line = $0; sub(/^ *#wrong: /, "", line)
        n = split(line, parts, /, /)
        for (i = 1; i <= n; i++) if (parts[i] !~ /^[a-z-]+ 0$/) { print "wrong: " $0; bad = 1 }
        wrongs++; next
    }
    # a size row: bandwidth tables have 9 fields, the tcp-stream table 6
    /^ +[0-9]+ (B|KiB|MiB|GiB) / {
        rows++
        ok = (NF == 9 && $3 ~ /^[0-9.]+$/ && $4 ~ /^\[[0-9.]+-[0-9.]+\]$/ && $5 ~ /^[0-9.]+$/ &&
              $7 ~ /^([0-9.]+x|-)$/ && $8 ~ /^(>=[0-9.]+|-)$/ && $9 ~ /^(PASS|MISS|-)$/) ||
             (NF == 6 && $3 ~ /^[0-9.]+$/ && $4 ~ /^([0-9.]+|-)$/ && $6 ~ /^(PASS|MISS|-)$/)
        if (!ok) { print "row: " $0; bad = 1 }
        next
    }
    { print "unexpected line: " $0; bad = 1 }
    END {
        if (tables == 0) { print "no tables"; bad = 1 }
        if (lat == 0 || wrongs == 0) { print lat " latency lines, " wrongs " #wrong lines"; bad = 1 }
        exit bad
    }' "$tmp/report" || fail "report tables"
echo "ok: $(grep -c '^== ' "$tmp/report") tables ($libs)"
exit 0
