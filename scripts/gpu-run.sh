#!/usr/bin/env bash
# gpu-run.sh -- runs the packaged GPU tests, tkbench and the SASS summary on
# the GPU machine.
#
# Runs there, from the repository root, on what scripts/gpu-package.sh put
# in .gpu/ (carry it with the run).  Usage:
#   scripts/gpu-run.sh [all|test|bench|sass]
# Logs go to $OUT when set (the device tool brings that folder back), else
# to .gpu/logs:
#   tests.log    verbose output of every test binary
#   tests.tap    their TAP reports
#   tkbench.txt  the benchmark table;  tkbench.csv  the same as CSV
#   sass.txt     cuobjdump -sass of the kernel library's cubin
#   sass-summary.txt  per kernel: 128-bit global loads/stores, all global
#                loads/stores, local-memory loads/stores (spills)
#   summary.txt  the short summary printed last
# Environment: TEST_JOBS (parallel Criterion jobs, default 4), and the
# tests' own TK_TEST_SEED and TK_REF_THREADS.
# Exit status: 0 when everything that ran passed.
set -u

mode=${1:-all}
case "$mode" in
all | test | bench | sass) ;;
*)
    echo "usage: scripts/gpu-run.sh [all|test|bench|sass]" >&2
    exit 2 ;;
esac

package=.gpu
# the package carries its binaries gzipped (gpu-package.sh)
if [[ ! -d $package/bin && -f $package/bin.tar.gz ]]; then
    tar -C "$package" -xzf "$package/bin.tar.gz"
fi
if [[ ! -d $package/bin ]]; then
    echo "gpu-run: no $package/bin here: run scripts/gpu-package.sh on the build machine" \
        "and carry .gpu" >&2
    exit 2
fi
export LD_LIBRARY_PATH="$package/lib:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
logs=${OUT:-$package/logs}
mkdir -p "$logs"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

summary=()
status=0

run_tests() {
    : >"$logs/tests.log"
    : >"$logs/tests.tap"
    local tests=(test_reference test_runtime)
    for binary in "$package"/bin/test_gpu_*; do
        [[ -x $binary ]] && tests+=("$(basename "$binary")")
    done
    for test in "${tests[@]}"; do
        local binary="$package/bin/$test"
        if [[ ! -x $binary ]]; then
            summary+=("$test: not packaged")
            continue
        fi
        local start=$SECONDS
        echo "==== $test" >>"$logs/tests.log"
        "$binary" --verbose --jobs="${TEST_JOBS:-4}" --tap="$scratch/$test.tap" \
            >"$scratch/$test.log" 2>&1
        local rc=$?
        cat "$scratch/$test.log" >>"$logs/tests.log"
        [[ -f $scratch/$test.tap ]] && cat "$scratch/$test.tap" >>"$logs/tests.tap"
        local synthesis
        synthesis=$(grep -a 'Synthesis' "$scratch/$test.log" | tail -1 | sed 's/.*Synthesis: //')
        summary+=("$test: exit $rc in $((SECONDS - start)) s; ${synthesis:-no synthesis line}")
        # the first failures, so the summary says what broke
        while IFS= read -r line; do
            summary+=("    $line")
        done < <(awk '/Assertion Failed/ { print; grab = 3; next }
                      grab > 0 { grab--; if ($0 !~ /^\[----\] *$/) { print; grab = 0 }; next }
                      /\[FAIL\]|CRASH/ { print }' "$scratch/$test.log" | head -12)
        [[ $rc == 0 ]] || status=1
    done
}

run_bench() {
    local start=$SECONDS
    "$package/bin/tkbench" --csv "$logs/tkbench.csv" >"$logs/tkbench.txt" 2>"$scratch/tkbench.err"
    local rc=$?
    cat "$logs/tkbench.txt"
    cat "$scratch/tkbench.err" >>"$logs/tkbench.txt"
    summary+=("tkbench: exit $rc in $((SECONDS - start)) s")
    while IFS= read -r line; do
        summary+=("    $line")
    done < <(sed -n '/^kernel /,$p' "$logs/tkbench.txt")
    [[ $rc == 0 ]] || status=1
}

run_sass() {
    local cuobjdump
    cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
    if [[ ! -f $package/tk_kernels.cubin || ! -x $cuobjdump ]]; then
        summary+=("sass: no cubin or no cuobjdump")
        status=1
        return
    fi
    "$cuobjdump" -sass "$package/tk_kernels.cubin" >"$logs/sass.txt" 2>&1 || status=1
    awk '
        /Function : / { name = $NF; names[++count] = name; next }
        name == "" { next }
        /LDG\.E\.128/ { ldg128[name]++ }
        /STG\.E\.128/ { stg128[name]++ }
        /[^A-Z]LDG[. ]/ { ldg[name]++ }
        /[^A-Z]STG[. ]/ { stg[name]++ }
        /[^A-Z]LDL[. ]/ { ldl[name]++ }
        /[^A-Z]STL[. ]/ { stl[name]++ }
        END {
            printf "%-64s %9s %9s %6s %6s %5s %5s\n", "kernel", "LDG.E.128", "STG.E.128",
                   "LDG", "STG", "LDL", "STL"
            for (i = 1; i <= count; i++) {
                n = names[i]
                printf "%-64s %9d %9d %6d %6d %5d %5d\n", n, ldg128[n], stg128[n], ldg[n],
                       stg[n], ldl[n], stl[n]
            }
        }' "$logs/sass.txt" >"$logs/sass-summary.txt"
    cat "$logs/sass-summary.txt"
    local kernels spilling
    kernels=$(($(wc -l <"$logs/sass-summary.txt") - 1))
    spilling=$(awk 'NR > 1 && ($6 > 0 || $7 > 0)' "$logs/sass-summary.txt" | wc -l)
    summary+=("sass: $kernels kernels; $spilling use local memory (LDL/STL)")
}

case "$mode" in
all) run_tests; run_bench; run_sass ;;
test) run_tests ;;
bench) run_bench ;;
sass) run_sass ;;
esac

{
    echo "==== gpu-run.sh $mode summary (logs in $logs)"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader \
        2>/dev/null | sed 's/^/gpu: /'
    printf '%s\n' "${summary[@]}"
    echo "overall: $([[ $status == 0 ]] && echo PASS || echo FAIL)"
} | tee "$logs/summary.txt"
exit $status
