#!/usr/bin/env bash
# Build .gpu/carry.tar.xz: the wheels the lent H200 image lacks for SGLang 0.5.16 (launch_server and
# bench_serving) plus ansible-core, small enough to travel in one device call (at most 64 MiB in all).
#
#   bash scripts/gpu/make_carry.sh        # from anywhere; works in the repository root
#
# Pins: scripts/gpu/carry-requirements.txt (one name==version a line). Steps:
#   1. download each pinned wheel for CPython 3.12 manylinux x86_64 into .gpu/dl (kept between runs:
#      pip skips files already there);
#   2. rewrite every wheel into .gpu/whl with stored (uncompressed) members, so that xz compresses
#      across all of them, trimming the two vendor wheels (scripts/gpu/trim_wheel.py; docs/gpu-runs.md);
#   3. pack .gpu/whl into .gpu/carry.tar.xz with xz -9 and print its size.
# .gpu/ is ignored through .git/info/exclude. Unpack on the host with: tar -xJf carry.tar.xz (gives whl/).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
pins=scripts/gpu/carry-requirements.txt
trim=scripts/gpu/trim_wheel.py
dl=.gpu/dl
whl=.gpu/whl
mkdir -p "$dl"

# Platforms first tried; some wheels (sglang 0.5.16: manylinux_2_34) need newer glibc tags, then 2_29..2_39.
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
newer=()
for n in $(seq 29 39); do newer+=(--platform "manylinux_2_${n}_x86_64"); done
get() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "$@" -d "$dl"
}

# 1. Download.
mapfile -t reqs < <(grep -Ev '^[[:space:]]*(#|$)' "$pins")
for pin in "${reqs[@]}"; do
    get "${plat[@]}" "$pin" || get "${plat[@]}" "${newer[@]}" "$pin"
done

# 2. Rewrite stored (and trim) into a fresh .gpu/whl, exactly one wheel per pin.
rm -rf "$whl"
mkdir -p "$whl"
shopt -s nullglob nocaseglob
for pin in "${reqs[@]}"; do
    name=${pin%%==*}
    version=${pin#*==}
    files=("$dl/${name//-/_}-${version}-"*.whl)
    if [ "${#files[@]}" -ne 1 ]; then
        echo "expected one wheel for $pin in $dl, found ${#files[@]}" >&2
        exit 1
    fi
    case "$name" in
        sglang-kernel)   # FA3 flash_ops (fa3 backend only), sm100 kernels (not sm_90), InfLLM-V2 ops
            python3 "$trim" "${files[0]}" "$whl" --stored \
                'sgl_kernel/flash_ops*.so' 'sgl_kernel/sm100/*' 'sgl_kernel/infllm_ops*.so' ;;
        xgrammar)        # static library for C++ users; Python loads the bindings .so
            python3 "$trim" "${files[0]}" "$whl" --stored 'xgrammar/lib/libxgrammar.a' ;;
        *)               # no pattern: only recompress (stored)
            python3 "$trim" "${files[0]}" "$whl" --stored >/dev/null ;;
    esac
done
echo "$(ls "$whl" | wc -l) wheels in $whl ($(du -sh "$whl" | cut -f1) stored)"

# 3. Pack (two threads: the machine is shared), then report the size.
rm -f .gpu/carry.tar.xz
XZ_OPT='-9 -T2' tar -C .gpu -cJf .gpu/carry.tar.xz whl
size=$(stat -c %s .gpu/carry.tar.xz)
echo ".gpu/carry.tar.xz: $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }') MiB)"
