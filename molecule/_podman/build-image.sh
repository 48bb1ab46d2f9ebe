#!/usr/bin/env bash
# Build the Molecule test-host image locally, without any container registry:
#   debootstrap --variant=minbase (Debian mirror read from this machine's apt sources) + `podman import`,
# with python3 (for Ansible) and systemd as PID 1 (systemd, systemd-sysv, dbus) plus sudo and ca-certificates.
#
# Idempotent: the image carries a label with the hash of its recipe (this script, the suite, the package
# list); when an image with that tag and that label exists, nothing is done. Bounded: debootstrap and the
# import run under `timeout`. Progress goes to stderr; debootstrap's own output to a log file whose tail is
# shown on failure. Concurrent callers (parallel test runs) are serialised with a lock.
#
# Usage: molecule/_podman/build-image.sh [--force]
# Environment (all optional):
#   EPFORGE_DEBIAN_SUITE     Debian suite         (default bookworm = Debian 12; trixie = Debian 13 for the
#                            controller test tests/test_controller_pythons.py)
#   EPFORGE_MOLECULE_IMAGE   image tag            (default localhost/epforge-molecule-SUITE:latest)
#   EPFORGE_DEBIAN_MIRROR    Debian mirror URL    (default: the first Debian URI in /etc/apt/sources.list*)
#   EPFORGE_IMAGE_TIMEOUT    seconds for debootstrap (default 900)
#   CONTAINERS_CONF          podman settings      (default: containers.conf next to this script)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}

suite=${EPFORGE_DEBIAN_SUITE:-bookworm}
case "$suite" in bookworm|trixie) ;; *) echo "build-image: EPFORGE_DEBIAN_SUITE must be bookworm or trixie, not '$suite'" >&2; exit 2;; esac
image=${EPFORGE_MOLECULE_IMAGE:-localhost/epforge-molecule-$suite:latest}
# python3: Ansible's modules; python3-apt: ansible.builtin.apt without a bootstrap install;
# systemd + systemd-sysv + dbus: systemd as PID 1 (/sbin/init) and systemctl; sudo: become; rsync: role model's
# controller source (ansible.posix.synchronize).
packages=(python3 python3-apt systemd systemd-sysv dbus sudo ca-certificates rsync)
timeout_s=${EPFORGE_IMAGE_TIMEOUT:-900}
force=false
[ "${1:-}" = "--force" ] && force=true

log() { printf '%s build-image: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for tool in podman debootstrap timeout flock sha256sum; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed: run scripts/bootstrap.sh (apt: podman runc debootstrap)"
done

# debootstrap and the rootfs it writes need root: sudo when not root (podman itself may run rootless).
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "debootstrap needs root: run as root or install sudo"
  as_root=(sudo -n)
fi

# Container tweaks: a fresh machine-id per container, apt pointed at the same mirror, no package cache, and
# the units that cannot work in a container masked so `systemctl is-system-running` can reach `running`.
customize_rootfs() {
  local rootfs=$1 unit
  "${as_root[@]}" truncate -s 0 "$rootfs/etc/machine-id"
  printf 'deb %s %s main\n' "$mirror" "$suite" | "${as_root[@]}" tee "$rootfs/etc/apt/sources.list" >/dev/null
  for unit in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
              systemd-remount-fs.service systemd-modules-load.service sys-kernel-config.mount \
              sys-kernel-debug.mount sys-kernel-tracing.mount sys-fs-fuse-connections.mount \
              systemd-firstboot.service systemd-hwdb-update.service apt-daily.timer apt-daily-upgrade.timer; do
    "${as_root[@]}" ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
  done
  "${as_root[@]}" find "$rootfs/var/cache/apt/archives" "$rootfs/var/lib/apt/lists" -type f -delete
  # The emptied lists must not look fresh: apt's cache_valid_time reads the lists folder's mtime, and an
  # image built minutes ago made `apt: update_cache: true, cache_valid_time: 3600` skip its update and then
  # find no package at all (the gateway scenario's python3-venv, CI of 2026-12-04).
  "${as_root[@]}" touch -d @0 "$rootfs/var/lib/apt/lists"
  "${as_root[@]}" find "$rootfs/var/log" -name '*.log' -type f -delete
}
# Image settings given to `podman import --change`.
import_changes=('CMD ["/sbin/init"]' 'ENV container=podman' 'STOPSIGNAL SIGRTMIN+3')

# The recipe hash: the suite, the packages, the tweaks and the image settings (not the mirror, not this
# script's logging). Any change to them rebuilds the image.
recipe=$( { echo "$suite"; printf '%s\n' "${packages[@]}" "${import_changes[@]}"; declare -f customize_rootfs; } \
  | sha256sum | cut -c1-16)

current_recipe() {
  podman image inspect --format '{{ index .Labels "epforge.recipe" }}' "$image" 2>/dev/null || true
}

lock=${TMPDIR:-/tmp}/epforge-molecule-image-$suite.lock
exec 9>"$lock"
if ! flock -w "$((timeout_s + 300))" 9; then
  die "another build holds $lock for too long"
fi

if ! $force && [ "$(current_recipe)" = "$recipe" ]; then
  log "image $image is up to date (recipe $recipe); nothing to do"
  exit 0
fi

mirror=${EPFORGE_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # deb822 (URIs: ...) and one-line (deb URL suite ...) sources; take the first plain Debian archive.
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
    | sed -n -E 's#^[[:space:]]*URIs:[[:space:]]*([^[:space:]]+).*#\1#p; s#^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*#\2#p' \
    | grep -E '/debian/?$' | head -n1 || true)
fi
[ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list*: set EPFORGE_DEBIAN_MIRROR=http://deb.debian.org/debian"

cache_dir=${XDG_CACHE_HOME:-$HOME/.cache}/epforge/debootstrap
mkdir -p "$cache_dir"
work=$(mktemp -d "${TMPDIR:-/var/tmp}/epforge-rootfs.XXXXXX")
trap '"${as_root[@]}" rm -rf "$work"' EXIT
rootfs=$work/rootfs
build_log=$cache_dir/build-$suite.log

start=$(date +%s)
log "building $image (recipe $recipe) from $mirror $suite; packages: ${packages[*]}"
log "debootstrap log: $build_log (timeout ${timeout_s}s)"
include=$(IFS=,; echo "${packages[*]}")
if ! "${as_root[@]}" timeout "$timeout_s" debootstrap --variant=minbase --include="$include" --cache-dir="$cache_dir" \
      "$suite" "$rootfs" "$mirror" >"$build_log" 2>&1; then
  tail -n 30 "$build_log" >&2
  die "debootstrap failed or ran past ${timeout_s}s (log above, full log: $build_log)"
fi
log "debootstrap done in $(( $(date +%s) - start ))s"

customize_rootfs "$rootfs"
log "importing into podman"
old_id=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
changes=()
for change in "${import_changes[@]}"; do changes+=(--change "$change"); done
"${as_root[@]}" tar -C "$rootfs" --numeric-owner -cf - . \
  | timeout 300 podman import --quiet "${changes[@]}" \
      --change "LABEL epforge.recipe=$recipe" \
      --change "LABEL epforge.suite=$suite" \
      --message "epforge molecule host: debootstrap $suite minbase + ${packages[*]}" \
      - "$image" >/dev/null \
  || die "podman import failed"
[ "$(current_recipe)" = "$recipe" ] || die "imported image $image does not carry recipe label $recipe"
if [ -n "$old_id" ]; then
  # Drop the replaced image unless a container still uses it.
  podman rmi "$old_id" >/dev/null 2>&1 || true
fi
log "image $image ready in $(( $(date +%s) - start ))s ($(podman image inspect --format '{{.Size}}' "$image") bytes)"
