#!/bin/sh
# tk.sh -- the two set-up commands of the README, for a fresh Debian 12 machine.
#
#   scripts/tk.sh main   install what is missing, build (Release), compile the
#                        kernel library with tkc (timed), run tkbench when a
#                        GPU is present, print a summary
#   scripts/tk.sh test   install what is missing, build, run the whole test
#                        suite (ctest); GPU tests report skipped without a GPU
#
# Both modes are idempotent: packages already installed are not touched and
# the build directory is reused.  Environment knobs: TK_BUILD_DIR (default
# build/), TK_JOBS (default: number of CPUs), CUDA_HOME (default
# /usr/local/cuda).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${TK_BUILD_DIR:-$ROOT/build}
JOBS=${TK_JOBS:-$(nproc 2>/dev/null || echo 2)}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PACKAGES="llvm-22-dev flex bison libcriterion-dev libzstd-dev cmake pkg-config make gcc"
# ptxas must accept the PTX 9.0 that tkc emits: CUDA 13 or newer.
CUDA_MAJOR_MIN=13

say() { printf '%s\n' "tk.sh: $*"; }
die() { printf '%s\n' "tk.sh: error: $*" >&2; exit 1; }

usage() {
    echo "usage: scripts/tk.sh main|test" >&2
    exit 2
}

# Root runs apt-get directly; anyone else goes through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "installing packages needs root: run as root or install sudo"
    fi
}

missing_packages() {
    for package in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null |
            grep -q "install ok installed" || printf '%s ' "$package"
    done
}

APT_UPDATED=no
apt_install() {
    if [ "$APT_UPDATED" = no ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        APT_UPDATED=yes
    fi
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "$@"
}

install_packages() {
    command -v dpkg-query >/dev/null 2>&1 ||
        die "this script sets up Debian (dpkg/apt); install by hand: $PACKAGES"
    missing=$(missing_packages)
    if [ -z "$missing" ]; then
        say "packages: all present"
        return
    fi
    say "packages: installing $missing"
    # shellcheck disable=SC2086 # one word per package
    apt_install $missing
}

ptxas_major() {
    "$1" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p'
}

# The CUDA toolkit provides ptxas and cuda.h (no GPU or driver needed to
# build).  NVIDIA's toolkit in /usr/local/cuda is the supported one.
find_cuda() {
    if [ ! -x "$CUDA_HOME/bin/ptxas" ] || [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
        if [ -x /usr/bin/ptxas ] && [ -f /usr/include/cuda.h ]; then
            CUDA_HOME=/usr
        else
            candidate=$(apt-cache policy nvidia-cuda-toolkit 2>/dev/null |
                        sed -n 's/^ *Candidate: *//p')
            if [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
                say "CUDA: $CUDA_HOME missing; trying Debian's nvidia-cuda-toolkit $candidate"
                apt_install nvidia-cuda-toolkit
                CUDA_HOME=/usr
            else
                die "the CUDA toolkit (ptxas, cuda.h) is missing: no $CUDA_HOME and no
  Debian nvidia-cuda-toolkit package (it is in 'non-free' and too old anyway).
  Install NVIDIA's CUDA $CUDA_MAJOR_MIN toolkit (package cuda-toolkit-13-0 from
  https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/),
  or set CUDA_HOME to an existing one, then rerun."
            fi
        fi
    fi
    major=$(ptxas_major "$CUDA_HOME/bin/ptxas")
    [ -n "$major" ] || die "cannot run $CUDA_HOME/bin/ptxas --version"
    [ "$major" -ge "$CUDA_MAJOR_MIN" ] ||
        die "$CUDA_HOME/bin/ptxas is CUDA $major; tkc emits PTX 9.0, which needs CUDA $CUDA_MAJOR_MIN or newer (set CUDA_HOME)"
    say "CUDA: $CUDA_HOME (ptxas from CUDA $major)"
}

configure_and_build() {
    say "configure: $BUILD (Release)"
    cmake -S "$ROOT" -B "$BUILD" -G "Unix Makefiles" \
        -DCMAKE_BUILD_TYPE=Release -DCUDA_HOME="$CUDA_HOME" >/dev/null
    say "build: make -j$JOBS"
    cmake --build "$BUILD" -j "$JOBS"
}

# nvidia-smi is the cheap probe; the tests and tkbench ask the driver
# themselves (tk_device_check) and agree with it.
gpu_present() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}

now_ns() { date +%s%N; }

main_job() {
    out="$BUILD/main"
    mkdir -p "$out"
    say "kernel library: tkc kernels.tk (timed)"
    start=$(now_ns)
    "$BUILD/tkc" "$ROOT/kernels.tk" -o "$out/tk_kernels.cubin" --time
    end=$(now_ns)
    compile_ms=$(( (end - start) / 1000000 ))
    cubin_bytes=$(wc -c < "$out/tk_kernels.cubin")
    # each launcher is declared, then defined: count distinct names
    kernels=$(grep -o '^tk_status tkl_[A-Za-z0-9_]*' "$BUILD/tk_kernels.h" |
              sort -u | wc -l)

    bench="skipped (no GPU found by nvidia-smi)"
    if gpu_present; then
        if [ -x "$BUILD/tkbench" ]; then
            say "tkbench: running"
            if "$BUILD/tkbench" --csv "$out/tkbench.csv"; then
                bench="ran, all checks passed ($out/tkbench.csv)"
            else
                bench="FAILED (see output above)"
            fi
        else
            bench="not built (no bench/ sources)"
        fi
    fi

    echo
    echo "==== tk.sh main: summary ===="
    echo "build:          $BUILD (Release)"
    echo "kernel library: $kernels kernel instances, cubin $cubin_bytes bytes"
    echo "tkc time:       $compile_ms ms for the whole library (kernels.tk -> cubin)"
    echo "libtk:          $(ls "$BUILD"/libtk.so.* "$BUILD"/libtk.a 2>/dev/null | tr '\n' ' ')"
    echo "tkbench:        $bench"
    case $bench in FAILED*) return 1 ;; esac
}

test_job() {
    if gpu_present; then
        gpu="present: GPU tests ran"
    else
        gpu="none: GPU tests report skipped"
    fi
    say "tests: ctest (GPU $gpu)"
    status=0
    ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" || status=$?
    echo
    echo "==== tk.sh test: summary ===="
    echo "build:  $BUILD (Release)"
    echo "GPU:    $gpu"
    if [ "$status" -eq 0 ]; then
        echo "tests:  all passed"
    else
        echo "tests:  FAILED (ctest exit status $status)"
    fi
    return "$status"
}

[ $# -eq 1 ] || usage
case $1 in
main | test) ;;
*) usage ;;
esac

install_packages
find_cuda
configure_and_build
case $1 in
main) main_job ;;
test) test_job ;;
esac
