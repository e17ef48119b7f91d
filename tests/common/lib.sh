# shellcheck shell=sh
# What the shell tests share (tests/launcher, tests/ddp, tests/auth), sourced once the test has
# set case_name and T, its temporary folder:
#   fail MESSAGE   "FAIL [case]: MESSAGE" on stderr, then the files a failure is judged by (the
#                  globs in FAIL_FILES, default $T/out and $T/err): the last FAIL_LINES (30)
#                  lines of each, or the first where FAIL_FROM=head; exit 1
#   now_ms         milliseconds of the clock, for the times a test bounds (whole seconds where
#                  date has no %N)

fail() {
    echo "FAIL [$case_name]: $*" >&2
    # shellcheck disable=SC2086 # the globs are meant to expand
    for f in ${FAIL_FILES:-"$T"/out "$T"/err}; do
        [ -f "$f" ] || continue
        if [ "${FAIL_FROM:-tail}" = head ]; then
            echo "--- $f (first ${FAIL_LINES:-30} lines)" >&2
            head -n "${FAIL_LINES:-30}" "$f" >&2
        else
            echo "--- $f (last ${FAIL_LINES:-30} lines)" >&2
            tail -n "${FAIL_LINES:-30}" "$f" >&2
        fi
    done
    exit 1
}

now_ms() {
    d=$(date +%s%N)
    case $d in
    *N*) echo $(($(date +%s) * 1000)) ;;
    *) echo $((d / 1000000)) ;;
    esac
}
