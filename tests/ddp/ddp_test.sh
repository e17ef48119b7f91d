#!/bin/sh
# Tests of the data-parallel trainer (examples/ddp/ddp_train), run under hooprun as users run it.
#   ddp_test.sh CASE HOOPRUN DDP_TRAIN WCMP [PYTHON TORCH_REF]
#   ddp_test.sh survive TRANSPORT HOOPRUN DDP_TRAIN WCMP SURVIVE_REF
# CASE: usage equiv-linear equiv-mlp replicas resume-stop resume-restart sync checkpoint-bad
#       mismatch peer-lost torch survive
#
# Tolerance. Runs that differ only in how the global batch is split among ranks compute the same
# mathematics with float32 sums in another order (per-rank partial means, then the all-reduce
# average), so their weights differ by rounding only: measured at 1e-7 to 6e-7 of the largest
# weight after 3 to 10 epochs (a few ulps; SGD on these problems damps rounding errors instead of
# amplifying them). TOL = 1e-5 leaves a margin of 15x and more, and is still 300x below what a real
# difference does: the same job with half the global batch ends 3e-3 (linear) to 7e-2 (mlp) apart,
# and the equivalence tests check that control too. Runs that differ in nothing that changes the
# order of any float operation (a resume, overlap or not) must match bit for bit.
set -u

case_name=$1
if [ "$case_name" = survive ]; then
    TRANSPORT=$2
    shift
fi
HOOPRUN=$2
TRAIN=$3
WCMP=$4
PYTHON=${5:-}
TORCH_REF=${6:-}
TOL=1e-5

T=$(mktemp -d "${TMPDIR:-/tmp}/ddp-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

# shellcheck source=tests/common/lib.sh
. "$(dirname "$0")/../common/lib.sh"

# run N ARGS...: ddp_train on N ranks, output in $T/out and $T/err, status in rc.
run() {
    n=$1
    shift
    "$HOOPRUN" -n "$n" "$TRAIN" "$@" >"$T/out" 2>"$T/err"
    rc=$?
}

# train N ARGS...: as run, and the job must succeed.
train() {
    run "$@"
    [ "$rc" -eq 0 ] || fail "ddp_train -n $1 failed with status $rc"
}

expect_err() {
    grep -q -- "$1" "$T/err" || fail "stderr lacks '$1'"
}

same_weights() { # A B: within TOL
    "$WCMP" "$1" "$2" --tol "$TOL" || fail "$1 and $2 differ by more than $TOL"
}

exact_weights() {
    "$WCMP" "$1" "$2" --exact || fail "$1 and $2 are not bit-identical"
}

# The per-epoch losses of two --metrics files (or "epoch loss" files) agree within TOL, relatively.
same_losses() {
    sed 's/,/ /g' "$1" | grep '^[0-9]' | cut -d' ' -f1,2 >"$T/la"
    sed 's/,/ /g' "$2" | grep '^[0-9]' | cut -d' ' -f1,2 >"$T/lb"
    [ -s "$T/la" ] || fail "no losses in $1"
    [ "$(wc -l <"$T/la")" -eq "$(wc -l <"$T/lb")" ] || fail "$1 and $2 have different epochs"
    paste -d' ' "$T/la" "$T/lb" | awk -v tol="$TOL" '
        { d = $2 - $4; if (d < 0) d = -d; s = $4 < 0 ? -$4 : $4
          if ($1 != $3 || d > tol * s) { print "epoch " $1 ": loss " $2 " against " $4; bad = 1 } }
        END { exit bad }' || fail "the losses of $1 and $2 differ"
}

# The epoch and loss columns of two --metrics files are identical text (the loss is printed with
# 17 digits, so this is bit-identity of the float64 average).
exact_losses() {
    cut -d, -f1,2 "$1" >"$T/la"
    cut -d, -f1,2 "$2" >"$T/lb"
    [ "$(wc -l <"$T/la")" -gt 1 ] || fail "no losses in $1"
    diff "$T/la" "$T/lb" >&2 || fail "the loss curves of $1 and $2 differ"
}

test_usage() {
    "$TRAIN" -h >"$T/out" 2>"$T/err" || fail "-h failed"
    grep -q '^usage: ddp_train' "$T/out" || fail "-h prints no usage"
    for o in --model --hidden --batch --epochs --save-every --seed --bucket-mb --sync --no-overlap \
        --checkpoint --dump-weights --check-replicas --quiet --stop-after --fail-at-epoch; do
        grep -q -- "$o" "$T/out" || fail "the usage does not mention $o"
    done
    for bad in "--model cnn" "--hidden 0 --model mlp" "--model mlp --hidden 8,,8" "--hidden 8" \
        "--batch 0" "--lr -1" "--lr x" "--sync tree" "--epochs" "--bucket-mb -2" "--samples 0" \
        "--no-such-option" "extra" "--save-every 2"; do
        # shellcheck disable=SC2086
        "$TRAIN" $bad >"$T/out" 2>"$T/err"
        rc=$?
        [ "$rc" -eq 2 ] || fail "'$bad': status $rc, expected 2"
        grep -q '^ddp_train: .*(see ddp_train -h)$' "$T/err" || fail "'$bad': no clear message"
    done
    # A model too large for the trainer: a sentence and status 1, not a crash.
    "$TRAIN" --model mlp --hidden 65536,65536,65536,65536,65536 >"$T/out" 2>"$T/err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "a huge model: status $rc, expected 1"
    expect_err "ddp_train: rank 0: model: "
}

# N ranks with batch B/N each reach the weights and losses of one rank with batch B.
equiv() {
    a="$* --epochs 4 --quiet"
    # shellcheck disable=SC2086
    train 1 $a --batch 48 --dump-weights "$T/w1" --metrics "$T/m1"
    for n in 2 4; do
        # shellcheck disable=SC2086
        train $n $a --batch $((48 / n)) --dump-weights "$T/w$n" --metrics "$T/m$n"
        same_weights "$T/w$n" "$T/w1"
        same_losses "$T/m$n" "$T/m1"
    done
    # The control: the same per-rank batch on one rank (half the global batch) is not the same job.
    # shellcheck disable=SC2086
    train 1 $a --batch 24 --dump-weights "$T/w1h"
    "$WCMP" "$T/w1h" "$T/w1" --differ 1e-3 || fail "half the global batch gives the same weights"
}

test_equiv_linear() { equiv --model linear --lr 0.1; }
test_equiv_mlp() { equiv --model mlp --hidden 32,16 --lr 0.05; }

test_replicas() {
    # 2, 3 (the last batch short, the data padded) and 4 ranks, in 4 buckets of which one holds
    # tensors of two layers.
    for n in 2 3 4; do
        train $n --model mlp --hidden 40,24 --samples 500 --batch 9 --epochs 2 --bucket-mb 0.0001 \
            --check-replicas
        grep -q 'in 4 buckets' "$T/out" || fail "expected 4 buckets"
    done
    # One altered bit on rank 2 must be caught at once, with the parameter named, on every rank.
    run 4 --model mlp --hidden 40,24 --samples 500 --batch 9 --epochs 2 --check-replicas \
        --test-diverge 2 --quiet
    [ "$rc" -eq 1 ] || fail "diverged replicas: status $rc, expected 1"
    expect_err "replicas differ after epoch 0 step 0: 1 of 1849 parameters are not bit-identical"
    expect_err "the first is layer 1 weight\["
}

test_resume_stop() {
    a="--model mlp --hidden 32,16 --lr 0.05 --epochs 5 --quiet"
    # shellcheck disable=SC2086
    train 2 $a --dump-weights "$T/wa" --metrics "$T/ma"
    # shellcheck disable=SC2086
    train 2 $a --checkpoint "$T/ck" --stop-after 2 --metrics "$T/mb" --dump-weights "$T/w2"
    [ -f "$T/ck" ] || fail "no checkpoint"
    for f in "$T"/ck.tmp*; do
        [ -e "$f" ] && fail "a temporary checkpoint file is left: $f"
    done
    [ "$(head -c 7 "$T/ck")" = HOOPDDP ] || fail "the checkpoint has no magic"
    [ "$(grep -c '^[0-9]' "$T/mb")" -eq 2 ] || fail "--stop-after 2 ran other than 2 epochs"
    "$WCMP" "$T/w2" "$T/wa" --differ 1e-3 || fail "2 epochs end where 5 do"
    # The restart, without --quiet: it says where it resumes.
    "$HOOPRUN" -n 2 "$TRAIN" --model mlp --hidden 32,16 --lr 0.05 --epochs 5 --checkpoint "$T/ck" \
        --metrics "$T/mb" --dump-weights "$T/wb" >"$T/out" 2>"$T/err" || fail "the resumed run failed"
    grep -q "resuming from $T/ck after epoch 1 (restart 0)" "$T/out" || fail "no resume message"
    [ "$(grep -c '^\[0\] *[0-9]' "$T/out")" -eq 3 ] || fail "the resumed run ran other than 3 epochs"
    exact_weights "$T/wb" "$T/wa"
    exact_losses "$T/mb" "$T/ma"
    # Resuming a finished job does nothing and keeps the weights.
    train 2 --model mlp --hidden 32,16 --lr 0.05 --epochs 5 --checkpoint "$T/ck" --dump-weights "$T/wc"
    grep -q 'nothing to do' "$T/out" || fail "a finished job trained again"
    exact_weights "$T/wc" "$T/wa"
}

test_resume_restart() {
    a="--model mlp --hidden 32,16 --lr 0.05 --epochs 5"
    # shellcheck disable=SC2086
    train 3 $a --quiet --dump-weights "$T/wa" --metrics "$T/ma"
    # The last rank dies in the middle of epoch 3 of the first attempt; checkpoints every 2 epochs, so
    # the restart resumes after epoch 1 and runs epochs 2 to 4 again.
    for r in 2 0; do
        rm -f "$T/ck"
        # shellcheck disable=SC2086
        "$HOOPRUN" -n 3 --max-restarts 1 "$TRAIN" $a --checkpoint "$T/ck" --save-every 2 \
            --fail-at-epoch 3 --fail-rank $r --metrics "$T/mb" --dump-weights "$T/wb" \
            >"$T/out" 2>"$T/err" || fail "the restarted job failed (rank $r failing)"
        expect_err "rank $r: failing on purpose in epoch 3, step 11"
        # hooprun names the first failed rank it reaps. On a loaded machine a survivor that saw
        # rank $r go may have exited too before hooprun ran, and then it cannot tell which went
        # first: the rank it names is rank $r, or one that failed for having lost rank $r.
        f=$(sed -n 's/^hooprun: restarting all ranks (restart 1 of 1) after rank \([0-9]*\) failed.*/\1/p' "$T/err")
        [ -n "$f" ] || fail "stderr lacks hooprun's restart line"
        [ "$f" = "$r" ] || grep -q "^\[$f\] .*lost rank $r " "$T/err" ||
            fail "hooprun restarted after rank $f, which neither failed on purpose nor lost rank $r"
        grep -q "resuming from $T/ck after epoch 1 (restart 1)" "$T/out" || fail "no resume message"
        exact_weights "$T/wb" "$T/wa"
        exact_losses "$T/mb" "$T/ma"
    done
    # Without a restart the injected failure is the job's status.
    # shellcheck disable=SC2086
    run 2 $a --quiet --fail-at-epoch 0
    [ "$rc" -eq 3 ] || fail "--fail-at-epoch without restarts: status $rc, expected 3"
}

test_sync() {
    a="--model mlp --hidden 48,32 --samples 512 --epochs 3 --lr 0.05 --batch 8 --quiet"
    for s in ring ps rd; do
        # shellcheck disable=SC2086
        train 4 $a --sync $s --dump-weights "$T/w-$s" --metrics "$T/m-$s"
    done
    same_weights "$T/w-ps" "$T/w-ring"
    same_losses "$T/m-ps" "$T/m-ring"
    same_weights "$T/w-rd" "$T/w-ring"
    # Overlap changes when the buckets are reduced, not how: the same bits, on 4 ranks, with the
    # buckets as large as the model (ring) or one per tensor (ps).
    # shellcheck disable=SC2086
    train 4 $a --sync ring --no-overlap --dump-weights "$T/w-no"
    exact_weights "$T/w-no" "$T/w-ring"
    # shellcheck disable=SC2086
    train 4 $a --sync ps --bucket-mb 0 --dump-weights "$T/w-b0"
    # shellcheck disable=SC2086
    train 4 $a --sync ps --bucket-mb 0 --no-overlap --dump-weights "$T/w-b0-no"
    exact_weights "$T/w-b0-no" "$T/w-b0"
}

# --sym-buckets: the gradients in symmetric memory, whose all-reduces run zero-copy (the schedule
# trace says so), train to the same bits as the same run with ordinary buffers.
test_sym() {
    a="--model mlp --hidden 256,128 --samples 384 --epochs 2 --lr 0.05 --batch 8 --quiet"
    for n in 2 3; do
        # shellcheck disable=SC2086
        train $n $a --dump-weights "$T/w-plain-$n"
        grep -q "from every rank's input" "$T/err" && fail "$n ranks: zero-copy without --sym-buckets"
        export HOOP_TRACE=1
        # shellcheck disable=SC2086
        train $n $a --sym-buckets --dump-weights "$T/w-sym-$n"
        unset HOOP_TRACE
        grep -q "from every rank's input" "$T/err" ||
            fail "$n ranks: --sym-buckets did not run the zero-copy all-reduce"
        exact_weights "$T/w-sym-$n" "$T/w-plain-$n"
    done
    # One rank with the option, one without: the options check stops both, before any allocation.
    # shellcheck disable=SC2086
    "$HOOPRUN" -n 2 sh -c 'if [ "$RANK" = 0 ]; then exec "$0" "$@" --sym-buckets; fi; exec "$0" "$@"' \
        "$TRAIN" $a >"$T/out" 2>"$T/err"
    [ $? -ne 0 ] || fail "--sym-buckets on one rank only did not fail"
    expect_err "other options than rank 0"
    # With --survive: after a rank's death the buckets stay in the old communicator's memory,
    # which goes with it at the end; the survivors finish.
    rm -f "$T"/rdv*
    for r in 0 1 2 3; do
        # shellcheck disable=SC2086
        RANK=$r WORLD_SIZE=4 "$TRAIN" --init-method "file://$T/rdv" $a --survive --kill-at-epoch 1 \
            --fail-rank 1 --sym-buckets >"$T/out$r" 2>"$T/err$r" &
        eval "pid$r=\$!"
    done
    for r in 0 1 2 3; do
        eval "wait \$pid$r"
        rc=$?
        [ "$r" -eq 1 ] || [ "$rc" -eq 0 ] || fail "--survive --sym-buckets: rank $r status $rc"
    done
    grep -q '^ddp_train: survived: ' "$T"/err0 || fail "--survive --sym-buckets: no shrink"
}

test_checkpoint_bad() {
    a="--model mlp --hidden 16,8 --samples 256 --epochs 2 --quiet --checkpoint $T/ck"
    # shellcheck disable=SC2086
    train 2 $a
    cp "$T/ck" "$T/good"
    size=$(wc -c <"$T/good")
    # resume_fails MESSAGE: a 2-rank resume from $T/ck fails on every rank with the message.
    resume_fails() {
        # shellcheck disable=SC2086
        run 2 $a --epochs 3
        [ "$rc" -eq 1 ] || fail "$1: status $rc, expected 1"
        expect_err "$1"
        grep -q 'rank 1: rank 0 could not load the checkpoint' "$T/err" ||
            grep -q 'hooprun: rank 0 .* exited with status 1' "$T/err" || fail "$1: rank 1 did not stop"
    }
    printf 'not a checkpoint at all' >"$T/ck"
    resume_fails "is not a ddp_train checkpoint (no HOOPDDP magic)"
    head -c $((size - 100)) "$T/good" >"$T/ck"
    resume_fails "is damaged or truncated"
    : >"$T/ck"
    resume_fails "is not a ddp_train checkpoint"
    # One flipped byte among the weights, then in the version field.
    cp "$T/good" "$T/ck"
    printf '\377' | dd of="$T/ck" bs=1 seek=$((size - 40)) conv=notrunc 2>/dev/null
    resume_fails "its checksum does not match its contents"
    cp "$T/good" "$T/ck"
    printf '\011' | dd of="$T/ck" bs=1 seek=8 conv=notrunc 2>/dev/null
    resume_fails "is a checkpoint of format version 9; this program reads version 1"
    # Another model, another seed.
    cp "$T/good" "$T/ck"
    run 2 --model mlp --hidden 16,9 --samples 256 --epochs 3 --quiet --checkpoint "$T/ck"
    [ "$rc" -eq 1 ] || fail "another model: status $rc"
    expect_err "holds another job: model 20-16-8-1, 256 samples, seed 42; this run has model 20-16-9-1"
    run 2 --model mlp --hidden 16,8 --samples 256 --epochs 3 --quiet --checkpoint "$T/ck" --seed 7
    [ "$rc" -eq 1 ] || fail "another seed: status $rc"
    expect_err "holds another job"
    # A checkpoint that cannot be written is an error on every rank, not a silent loss.
    mkdir "$T/ro" && chmod 500 "$T/ro"
    if [ ! -w "$T/ro" ]; then # root writes anywhere: then only a missing directory fails
        run 2 --samples 256 --epochs 1 --quiet --checkpoint "$T/ro/ck"
    else
        run 2 --samples 256 --epochs 1 --quiet --checkpoint "$T/missing/ck"
    fi
    [ "$rc" -eq 1 ] || fail "an unwritable checkpoint: status $rc"
    expect_err "rank 0: checkpoint: cannot create"
}

test_mismatch() {
    # Ranks given different options are told so before any training.
    # shellcheck disable=SC2016
    "$HOOPRUN" -n 2 sh -c 'exec "$0" --model mlp --hidden $((8 + RANK)) --epochs 1 --quiet' "$TRAIN" \
        >"$T/out" 2>"$T/err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "different options: status $rc, expected 1"
    expect_err "rank 1 was started with other options than rank 0 (every rank needs the same)"
}

test_peer_lost() {
    # Two ranks started by hand (file:// rendezvous); rank 1 dies in epoch 1. Rank 0's failed hoop
    # call says what failed and why (the library's last error), and it exits 1 instead of hanging.
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 "$TRAIN" --init-method "file://$T/rdv" --epochs 3 --samples 512 \
            --quiet --fail-at-epoch 1 --fail-rank 1 >"$T/out$r" 2>"$T/err$r" &
        eval "pid$r=\$!"
    done
    # shellcheck disable=SC2154
    wait "$pid0"
    rc0=$?
    # shellcheck disable=SC2154
    wait "$pid1"
    rc1=$?
    cp "$T/err0" "$T/err"
    [ "$rc1" -eq 3 ] || fail "rank 1: status $rc1, expected 3"
    [ "$rc0" -eq 1 ] || fail "rank 0: status $rc0, expected 1"
    grep -q '^ddp_train: rank 0: .* failed: [A-Za-z ]*: .*rank 1' "$T/err0" ||
        fail "rank 0 does not name the failed call, the error and the lost peer"
}

test_survive() {
    # Four ranks started by hand (hooprun ends a job at its first death); the victim SIGKILLs
    # itself in epoch 1 with its gradient all-reduce posted. The survivors shrink, deal the rest
    # of the epoch out again and finish the job; their weights must be those of the same schedule
    # replayed in one process by survive_ref (4 ranks, then 3 from the step where they went on).
    a="--model mlp --hidden 32,16 --lr 0.05 --samples 500 --batch 8 --epochs 3"
    steps=16 # 500 samples on 4 ranks: 125 per rank, batches of 8
    for victim in 1 0; do
        rm -f "$T"/rdv* "$T"/w
        for r in 0 1 2 3; do
            # shellcheck disable=SC2086
            HOOP_TRANSPORT=$TRANSPORT RANK=$r WORLD_SIZE=4 "$TRAIN" --init-method "file://$T/rdv" \
                $a --quiet --survive --kill-at-epoch 1 --fail-rank $victim --dump-weights "$T/w" \
                >"$T/out$r" 2>"$T/err$r" &
            eval "pid$r=\$!"
        done
        cat /dev/null >"$T/err"
        for r in 0 1 2 3; do
            eval "wait \$pid$r"
            rc=$?
            cat "$T/err$r" >>"$T/err"
            if [ "$r" -eq "$victim" ]; then
                [ "$rc" -eq 137 ] || fail "the victim, rank $r: status $rc, expected 137 (SIGKILL)"
            else
                [ "$rc" -eq 0 ] || fail "survivor rank $r (victim $victim): status $rc, expected 0"
            fi
        done
        expect_err "rank $victim: SIGKILL on purpose in epoch 1, step 8"
        # Where the survivors went on: after step 8 (the victim's part of step 8 never came), or
        # 9 where its all-reduce had sent everything before it died.
        line=$(grep -h '^ddp_train: survived: ' "$T"/err[0-3])
        [ "$(printf '%s\n' "$line" | grep -c .)" -eq 1 ] || fail "not one 'survived' line: $line"
        s=$(printf '%s\n' "$line" |
            sed -n "s/^ddp_train: survived: epoch 1 goes on after step \([0-9]*\) of $steps on 3 of 4 ranks: .*/\1/p")
        [ "$s" = 8 ] || [ "$s" = 9 ] || fail "unexpected 'survived' line: $line"
        [ -s "$T/w" ] || fail "the survivors wrote no weights"
        # shellcheck disable=SC2086
        "$SURVIVE_REF" $a --world 4 --lost "1:$s:3" --out "$T/wref" || fail "survive_ref failed"
        same_weights "$T/w" "$T/wref"
        # The control: the job that loses no rank ends elsewhere.
        # shellcheck disable=SC2086
        "$SURVIVE_REF" $a --world 4 --out "$T/wfull" || fail "survive_ref failed"
        "$WCMP" "$T/w" "$T/wfull" --differ 1e-4 || fail "the survivors end where 4 ranks do"
    done
}

test_torch() {
    lin="--model linear --lr 0.1"
    mlp="--model mlp --hidden 32,16 --lr 0.05"
    # The first of the configured python3 and the system's that has PyTorch (77: it has not).
    rc=77
    for py in "$PYTHON" /usr/bin/python3; do
        [ -x "$py" ] || continue
        # shellcheck disable=SC2086
        "$py" "$TORCH_REF" $lin --epochs 4 --batch 16 --world 3 --out "$T/wt-lin" --losses "$T/lt-lin" \
            :: $mlp --epochs 4 --batch 16 --world 3 --out "$T/wt-mlp" --losses "$T/lt-mlp" 2>"$T/err"
        rc=$?
        [ "$rc" -eq 77 ] || break
    done
    [ "$rc" -eq 77 ] && { echo "no python3 with PyTorch: skipped"; exit 77; }
    [ "$rc" -eq 0 ] || fail "torch_ref.py failed with status $rc"
    lin="--model linear --lr 0.1"
    mlp="--model mlp --hidden 32,16 --lr 0.05"
    # shellcheck disable=SC2086
    for m in lin mlp; do
        eval "args=\$$m"
        # shellcheck disable=SC2086,SC2154
        train 3 $args --epochs 4 --batch 16 --quiet --dump-weights "$T/w3" --metrics "$T/m3"
        same_weights "$T/w3" "$T/wt-$m"
        same_losses "$T/m3" "$T/lt-$m"
    done
}

case $case_name in
usage | replicas | sync | mismatch | torch | sym) "test_$case_name" ;;
equiv-linear) test_equiv_linear ;;
equiv-mlp) test_equiv_mlp ;;
resume-stop) test_resume_stop ;;
resume-restart) test_resume_restart ;;
checkpoint-bad) test_checkpoint_bad ;;
peer-lost) test_peer_lost ;;
survive)
    SURVIVE_REF=$5
    test_survive
    ;;
*)
    echo "unknown case '$case_name'" >&2
    exit 2
    ;;
esac
echo "ok [$case_name]"
