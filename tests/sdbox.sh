#!/bin/bash
# A disposable machine with the host's systemd as its PID 1, for tests that need a real
# service manager (tests/debian/test_package.py installs the .deb in one).
#
#   tests/sdbox.sh up NAME          boot a box; returns once its systemd has finished booting
#   tests/sdbox.sh run NAME CMD...  run CMD inside as root, in a clean login-like environment
#                                   (stdin, stdout, stderr and the exit status pass through)
#   tests/sdbox.sh down NAME        power the box off and forget everything written in it
#
# Shape of a box:
# - its / is an overlay: the host's / read-only underneath, a tmpfs on top. Installing a
#   package in the box costs no copy and never reaches the host's disk;
# - its own pid, mount, uts, ipc and cgroup namespaces, so systemd runs as PID 1 and owns a
#   cgroup tree delegated to it;
# - the host's network: services in the box reach the host's MariaDB, Redis and test servers
#   on 127.0.0.1 (and could take host ports, hence the next point);
# - it boots to basic.target, and every unit the host image enables (databases, brokers,
#   timers, timesyncd, gettys) is masked, so the box runs only what a test starts.
# Needs root. Boots in well under a second; powers off in a few.
set -euo pipefail

verb=${1:?usage: sdbox.sh up|run|down NAME [CMD...]}
name=${2:?a box name}
shift 2

box=${SDBOX_DIR:-/run/batchd-sdbox}/$name
root=$box/root
self=$(readlink -f "$0")

# The box's cgroup lives in the host's cgroup2 hierarchy (the "unified" one on a hybrid host).
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
  cgroup=/sys/fs/cgroup/sdbox-$name
else
  cgroup=/sys/fs/cgroup/unified/sdbox-$name
fi

box_pid1() { cat "$box/pid1"; }

in_box() {
  nsenter --target "$(box_pid1)" --all -- \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb "$@"
}

mask_host_units() {
  local unit
  for unit in "$root"/etc/systemd/system/*.wants/*; do
    unit=${unit##*/}
    case $unit in *.target) continue ;; esac
    ln -sfn /dev/null "$root/etc/systemd/system/$unit"
  done
  # A getty on the console would fight the test for it; systemd adds this one in containers.
  ln -sfn /dev/null "$root/etc/systemd/system/console-getty.service"
}

up() {
  mkdir -p "$box/layers"
  mountpoint -q "$box/layers" || mount -t tmpfs -o mode=700 sdbox-layers "$box/layers"
  mkdir -p "$box/layers/upper" "$box/layers/work" "$root"
  mountpoint -q "$root" ||
    mount -t overlay sdbox-root -o "lowerdir=/,upperdir=$box/layers/upper,workdir=$box/layers/work" "$root"
  mask_host_units
  # A Docker-style image forbids starting services from maintainer scripts; a box is a machine.
  rm -f "$root/usr/sbin/policy-rc.d"

  mkdir -p "$cgroup"
  # setsid: the box must not die with the caller's session. The shell moves itself into the
  # box's cgroup first, so that cgroup becomes the root of the box's cgroup namespace.
  setsid bash -c "echo \$\$ > '$cgroup/cgroup.procs'
    exec unshare --pid --fork --mount --uts --ipc --cgroup --propagation private '$self' _boot '$name'" \
    </dev/null >"$box/console.log" 2>&1 &
  echo $! >"$box/unshare.pid"

  local pid="" i
  for i in $(seq 200); do
    pid=$(pgrep --parent "$(cat "$box/unshare.pid")" --exact systemd || true)
    if [ -n "$pid" ] && nsenter --target "$pid" --all test -S /run/systemd/private 2>/dev/null; then
      break
    fi
    pid=""
    sleep 0.05
  done
  if [ -z "$pid" ]; then
    echo "sdbox: systemd did not come up; console:" >&2
    cat "$box/console.log" >&2
    return 1
  fi
  echo "$pid" >"$box/pid1"
  if ! timeout 60 nsenter --target "$pid" --all systemctl is-system-running --wait >/dev/null; then
    echo "sdbox: the box did not boot cleanly:" >&2
    in_box systemctl --failed --no-pager >&2 || true
    return 1
  fi
}

# Runs as PID 1 of the new namespaces, before systemd replaces it.
boot() {
  mount -t proc proc "$root/proc"
  # Read-only /proc/sys and /sys: systemd-sysctl and udev must not touch the host's kernel
  # settings and devices (udev stays off when /sys is read-only).
  mount --bind "$root/proc/sys" "$root/proc/sys"
  mount -o remount,bind,ro "$root/proc/sys"
  mount -t sysfs -o ro sysfs "$root/sys"
  mount -t cgroup2 -o nsdelegate cgroup2 "$root/sys/fs/cgroup"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs -o mode=755 tmpfs "$root/run"
  mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
  hostname "$name"
  cd "$root"
  mkdir -p .host
  pivot_root . .host
  umount --lazy /.host
  rmdir /.host
  exec env -i container=sdbox TERM=dumb /usr/lib/systemd/systemd --system --unit=basic.target --show-status=no
}

down() {
  local unshare_pid="" i
  [ -f "$box/unshare.pid" ] && unshare_pid=$(cat "$box/unshare.pid")
  if [ -n "$unshare_pid" ] && kill -0 "$unshare_pid" 2>/dev/null; then
    [ -f "$box/pid1" ] && nsenter --target "$(box_pid1)" --all systemctl poweroff 2>/dev/null || true
    for i in $(seq 150); do
      kill -0 "$unshare_pid" 2>/dev/null || break
      sleep 0.1
    done
    # A box that will not power off: killing its PID 1 ends every process in it.
    if kill -0 "$unshare_pid" 2>/dev/null && [ -f "$box/pid1" ]; then
      kill -KILL "$(box_pid1)" 2>/dev/null || true
      for i in $(seq 50); do
        kill -0 "$unshare_pid" 2>/dev/null || break
        sleep 0.1
      done
    fi
  fi
  ! mountpoint -q "$root" || umount "$root"
  ! mountpoint -q "$box/layers" || umount "$box/layers"
  # The cgroups systemd made inside are empty now; remove the deepest first.
  [ ! -d "$cgroup" ] || find "$cgroup" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  rm -rf "$box"
}

case $verb in
  up) up ;;
  run) in_box "$@" ;;
  down) down ;;
  _boot) boot ;;
  *) echo "usage: sdbox.sh up|run|down NAME [CMD...]" >&2; exit 2 ;;
esac
