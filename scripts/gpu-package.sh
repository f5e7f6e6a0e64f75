#!/usr/bin/env bash
# gpu-package.sh -- builds what the GPU machine runs and packs it into .gpu/.
#
# Runs on the build machine (Debian 12).  Builds Release in build-gpu/, then
# assembles .gpu/ (gitignored; must stay under 60 MiB, the device tool
# carries at most 64 MiB):
#   .gpu/bin.tar.gz  test_gpu_*, test_runtime, test_reference, tkbench
#                  (gzipped: each binary embeds the 3 MB kernel cubin, so
#                  uncompressed they no longer fit the carry limit;
#                  gpu-run.sh unpacks them into .gpu/bin/)
#   .gpu/lib/      libtk.so*, and every shared library those need that the
#                  H200 machine (Ubuntu 24.04) lacks: everything ldd resolves
#                  except glibc's own libraries and libcuda (toolchain.md 10)
#   .gpu/tk_kernels.cubin   for `gpu-run.sh sass`
#   .gpu/gpu-run.sh
# Binaries are linked with --as-needed so that the test binaries, which
# link tkc_core but call none of it, do not pull in libLLVM (150 MB).
#
# Then, on the device: run with carry [".gpu"] and the command
#   scripts/gpu-run.sh all        (or test | bench | sass)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-gpu"
dest="$root/.gpu"
jobs=${JOBS:-2}
limit_mib=60

# every GPU test binary (tests/test_gpu_*.c), the CPU tests worth running
# there too, and the benchmark
targets=(tk test_reference test_runtime tkbench)
for source in "$root"/tests/test_gpu_*.c; do
    [[ -f $source ]] && targets+=("$(basename "$source" .c)")
done

cmake -S "$root" -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--as-needed" \
    -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--as-needed" >/dev/null
make -C "$build" -j"$jobs" "${targets[@]}"

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
for target in "${targets[@]}"; do
    [[ $target == tk ]] && continue
    cp "$build/$target" "$dest/bin/"
done
cp -P "$build"/libtk.so* "$dest/lib/"
cp "$build/tk_kernels.cubin" "$dest/"
cp "$root/scripts/gpu-run.sh" "$dest/"

# glibc's own libraries (present on every Linux) and the driver, which the
# GPU machine provides in /usr/local/nvidia/lib64
is_system_library() {
    case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | \
        libpthread.so.* | librt.so.* | libresolv.so.* | libutil.so.* | \
        libanl.so.* | libnsl.so.* | libmvec.so.* | libcuda.so.*)
        return 0 ;;
    esac
    return 1
}

missing=0
for file in "$dest"/bin/* "$dest"/lib/libtk.so.*.*; do
    [[ -L $file ]] && continue
    while read -r name arrow path _; do
        [[ $arrow == "=>" ]] || continue
        is_system_library "$name" && continue
        if [[ $path == "not" ]]; then
            echo "gpu-package: $(basename "$file") needs $name, which ldd cannot find" >&2
            missing=1
            continue
        fi
        case "$name" in
        libLLVM*)
            echo "gpu-package: $(basename "$file") needs $name (150 MB): it must not" \
                "call into tkc_core" >&2
            missing=1
            continue ;;
        esac
        [[ -e "$dest/lib/$name" ]] || cp -L "$path" "$dest/lib/$name"
    done < <(ldd "$file")
done
[[ $missing == 0 ]] || exit 1

ls -1 "$dest/bin" "$dest/lib" | sed 's/^/  /'
tar -C "$dest" -czf "$dest/bin.tar.gz" bin
rm -rf "$dest/bin"
size_mib=$(du -sm "$dest" | cut -f1)
echo "gpu-package: .gpu/ is ${size_mib} MiB"
if (( size_mib >= limit_mib )); then
    echo "gpu-package: .gpu/ is over the ${limit_mib} MiB limit" >&2
    exit 1
fi
echo "gpu-package: on the device, carry [\".gpu\"] and run: scripts/gpu-run.sh all"
