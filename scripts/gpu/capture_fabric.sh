#!/usr/bin/env bash
# Capture what epforge's fabric facts read on a GPU host, for test fixtures (tests/fixtures/fabric/):
# the sysfs files of every NVIDIA GPU and of each PCI bridge above it, the IOMMU state, the kernel command
# line, the NUMA and CPU socket layout, and the tools' own output (lspci -vvv, nvidia-smi -q, topo -m).
# Reads only; run as root so lspci shows the extended capabilities (ACS). Usage: capture_fabric.sh OUTDIR
set -uo pipefail
out=${1:?usage: capture_fabric.sh OUTDIR}
mkdir -p "$out/sys"
copy() { # a sysfs file, kept at the same path under $out/sys
  local src=$1
  [ -r "$src" ] || return 0
  mkdir -p "$out/sys$(dirname "$src")"
  cat "$src" > "$out/sys$src" 2>/dev/null || rm -f "$out/sys$src"
}
for dev in /sys/bus/pci/devices/*; do
  [ "$(cat "$dev/vendor" 2>/dev/null)" = "0x10de" ] || continue
  real=$(readlink -f "$dev")
  echo "$(basename "$dev") $real" >> "$out/gpus.txt"
  path=$real
  while [[ "$path" == /sys/devices/pci* ]]; do
    for f in vendor device class current_link_speed current_link_width max_link_speed max_link_width \
             numa_node local_cpulist resource; do
      copy "$path/$f"
    done
    [ -e "$path/iommu_group" ] && echo "$(readlink -f "$path/iommu_group")" > "$out/sys$path/iommu_group.link" 2>/dev/null
    path=$(dirname "$path")
  done
done
ls -la /sys/class/iommu/ > "$out/sys_class_iommu.txt" 2>&1
cat /proc/cmdline > "$out/proc_cmdline.txt"
for node in /sys/devices/system/node/node*; do copy "$node/cpulist"; done
for cpu in /sys/devices/system/cpu/cpu[0-9]*; do copy "$cpu/topology/physical_package_id"; done
(lspci -vvv -nn || echo "lspci failed rc=$?") > "$out/lspci-vvv.txt" 2>&1
(lspci -tv || true) > "$out/lspci-tv.txt" 2>&1
(nvidia-smi -q || true) > "$out/nvidia-smi-q.txt" 2>&1
(nvidia-smi topo -m || true) > "$out/nvidia-smi-topo-m.txt" 2>&1
(nvidia-smi --query-gpu=index,pci.bus_id,persistence_mode,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv || true) > "$out/nvidia-smi-query-pcie.csv" 2>&1
uname -a > "$out/uname.txt"
echo "captured $(date -u +%FT%TZ) on $(hostname)" > "$out/README.txt"
