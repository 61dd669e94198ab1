#!/bin/bash
# Boots a Debian root file system (scripts/container-rootfs.sh) with systemd as PID 1 in systemd-nspawn, runs
# commands inside it, and stops it: the harness of the systemd deployment test (SystemdDeploymentTests).
#
#   container.sh start ROOTFS STATE [LIFETIME]  boot; returns once systemd inside reports the system running
#   container.sh exec STATE COMMAND [ARG...]    run COMMAND inside as root, with the PATH a root login gets (stdin,
#                                               stdout, stderr and exit status passed)
#   container.sh reboot STATE                   `systemctl reboot` inside; returns once the same tree has booted again
#                                               and its systemd reports the system running; prints nspawn's exit status
#   container.sh pid STATE                      the container's systemd, as a PID of this machine
#   container.sh stop STATE                     power off (orderly, else killed) and remove STATE but its console.log
#
# ROOTFS is never written: the container sees an overlay of STATE/upper over it, so files put in STATE/upper before
# `start` (e.g. `make install DESTDIR=STATE/upper`) are installed in it, and each run starts from the same tree.
# The overlay is mounted inside a mount namespace of its own (unshare), so it disappears with the container and no
# mount is ever left on this machine. The container shares this machine's network (no --private-network): a
# server on 127.0.0.1 here is on 127.0.0.1 there.
# Nothing outlives a dead test: `timeout` powers the container off after LIFETIME seconds (default 900; SIGTERM to
# systemd-nspawn, which passes --kill-signal, SIGRTMIN+3 = orderly poweroff, to systemd) and SIGKILLs it 30 s
# later; a watcher stops it as soon as systemd-nspawn is gone (killed), or the process KEYMGR_CONTAINER_WATCH_PID
# names (the test) is.
# This machine runs no systemd: --register=no and --keep-unit keep nspawn from asking for machined or a scope.
# A reboot inside makes systemd-nspawn --boot exit with status 133; systemd-nspawn@.service restarts on it
# (RestartForceExitStatus=133), and so does the supervisor here: it boots the same overlay again (STATE/upper, so
# whatever the container wrote survives, as on a disk) and notes each exit in STATE/console.log. Any other exit ends it.
set -eu

usage() { echo "usage: container.sh start ROOTFS STATE [LIFETIME] | exec STATE COMMAND... | reboot STATE | pid STATE | stop STATE" >&2; exit 64; }
die() { echo "container.sh: $*" >&2; exit 1; }
[ $# -ge 2 ] || usage
action=$1
shift

# The PID of `systemd` whose PID-namespace PID is 1 and that descends from process $1.
find_systemd() {
  for status in /proc/[0-9]*/status; do
    pid=${status#/proc/}; pid=${pid%/status}
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ] || continue
    nspid=$(sed -n 's/^NSpid:[[:space:]]*//p' "$status" 2>/dev/null | awk '{ print $NF }')
    [ "$nspid" = 1 ] || continue
    ancestor=$pid
    while [ -n "$ancestor" ] && [ "$ancestor" -gt 1 ]; do
      if [ "$ancestor" = "$1" ]; then echo "$pid"; return 0; fi
      ancestor=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$ancestor/status" 2>/dev/null)
    done
  done
  return 1
}

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# Stops the container of STATE: SIGTERM to `timeout` (passed on to nspawn: orderly poweroff), SIGKILL after 30 s.
stop_container() {
  state=$1
  supervisor=$(cat "$state/supervisor.pid" 2>/dev/null || true)
  systemd=$(cat "$state/systemd.pid" 2>/dev/null || true)
  # The watcher calls stop itself; a stop from elsewhere ends it first, so only one stop runs.
  watcher=$(cat "$state/watcher.pid" 2>/dev/null || true)
  if [ "$watcher" != "$$" ] && alive "$watcher"; then kill -TERM "$watcher" 2>/dev/null || true; fi
  if alive "$supervisor"; then
    kill -TERM "$supervisor" 2>/dev/null || true
    waited=0
    while alive "$supervisor" && [ $waited -lt 300 ]; do sleep 0.1; waited=$((waited + 1)); done
  fi
  for pid in $(cat "$state/nspawn.pid" 2>/dev/null) "$supervisor" "$systemd"; do
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
  done
  # Killing PID 1 of the container kills every process in its PID namespace; wait for them to be gone.
  waited=0
  while alive "$systemd" && [ $waited -lt 100 ]; do sleep 0.1; waited=$((waited + 1)); done
  rm -rf "$state/merged" "$state/work" "$state/upper" "$state"/*.pid
}

# Waits for the container's systemd (a new one after a reboot) and for it to finish booting: records its PID in
# STATE/systemd.pid and prints it. Fails, after printing the failed units, when it does not report "running".
await_boot() {
  state=$1
  # systemd appears within a second or two; then `is-system-running --wait` returns once boot is finished.
  waited=0
  until [ -f "$state/nspawn.pid" ] && systemd=$(find_systemd "$(cat "$state/nspawn.pid")"); do
    if ! alive "$(cat "$state/supervisor.pid")" || [ $waited -ge 600 ]; then
      echo "container.sh: no systemd appeared in the container" >&2
      return 1
    fi
    sleep 0.1; waited=$((waited + 1))
  done
  echo "$systemd" > "$state/systemd.pid"
  # systemctl answers only once its bus is up; is-system-running --wait then blocks until boot is finished.
  # Until /run/systemd/system exists, systemctl answers "offline".
  waited=0
  until running=$(timeout 120 nsenter -t "$systemd" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
                    systemctl is-system-running --wait 2>/dev/null); [ -n "$running" ] && [ "$running" != offline ]; do
    if [ $waited -ge 100 ]; then break; fi
    sleep 0.2; waited=$((waited + 1))
  done
  if [ "$running" != running ]; then
    nsenter -t "$systemd" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin systemctl --failed --no-pager >&2 || true
    echo "container.sh: systemd in the container reports '${running:-nothing}', not running" >&2
    return 1
  fi
  echo "$systemd"
}

case $action in
start)
  [ $# -ge 2 ] || usage
  rootfs=$(realpath "$1"); state=$2; lifetime=${3:-900}
  [ -f "$rootfs/.keymgr-rootfs-complete" ] || die "$rootfs is not a complete root file system (scripts/container-rootfs.sh builds one)"
  [ ! -f "$state/supervisor.pid" ] || die "$state already has a container: stop it first"
  mkdir -p "$state/upper" "$state/work" "$state/merged"
  state=$(realpath "$state")
  : > "$state/console.log"
  # What outlives this script must hold none of the caller's descriptors: a caller that waits for the end of a
  # pipe or socket it gave (Foundation's Process does) would otherwise wait for the container's end.
  for fd in $(ls /proc/$$/fd); do
    if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
  # setsid: the container is not in the caller's process group, so a terminal's ^C reaches it only through stop.
  setsid timeout --signal=TERM --kill-after=30 "$lifetime" \
    unshare --mount --propagation private \
    sh -c 'mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$2/merged" || exit 1
           echo $$ > "$2/nspawn.pid"
           # A stop (SIGTERM to the process group, from `timeout`) reaches systemd-nspawn too, which powers the
           # container off; this shell runs the trap only once nspawn has exited, and then boots nothing again.
           stopping=; trap "stopping=1" TERM
           while :; do
             status=0
             systemd-nspawn --quiet --directory="$2/merged" --register=no --keep-unit --boot \
               --kill-signal=SIGRTMIN+3 --console=read-only || status=$?
             echo "container.sh: systemd-nspawn exited $status"
             if [ "$status" != 133 ] || [ -n "$stopping" ]; then exit "$status"; fi
             echo "container.sh: a reboot: booting the same tree again"
           done' \
    container "$rootfs" "$state" </dev/null >>"$state/console.log" 2>&1 &
  echo $! > "$state/supervisor.pid"
  disown
  # The watcher: a killed systemd-nspawn leaves the container's systemd running (it is nobody's child then), so
  # whenever the supervisor or the watched process is gone, the container is stopped and STATE cleaned.
  supervisor=$(cat "$state/supervisor.pid")
  setsid sh -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
                [ -f "$3/supervisor.pid" ] && exec "$4" stop "$3"' \
    watcher "${KEYMGR_CONTAINER_WATCH_PID:-$supervisor}" "$supervisor" "$state" "$(realpath "$0")" \
    </dev/null >/dev/null 2>&1 &
  echo $! > "$state/watcher.pid"
  disown
  await_boot "$state" || {
    tail -n 30 "$state/console.log" >&2
    stop_container "$state"
    die "the container did not boot (its console and failed units are above)"
  }
  ;;
reboot)
  state=$1
  systemd=$(cat "$state/systemd.pid" 2>/dev/null) || die "$state has no running container"
  alive "$systemd" || die "the container of $state is not running"
  exits=$(grep -c '^container.sh: systemd-nspawn exited ' "$state/console.log" || true)
  nsenter -t "$systemd" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin systemctl reboot || true
  # The old systemd goes (nspawn exits 133, the supervisor boots the tree again), then a new one boots.
  waited=0
  while alive "$systemd"; do
    [ $waited -lt 1200 ] || die "the container's systemd (pid $systemd) did not stop within 120 s of the reboot"
    sleep 0.1; waited=$((waited + 1))
  done
  rm -f "$state/systemd.pid"
  if ! new=$(await_boot "$state"); then
    tail -n 30 "$state/console.log" >&2
    die "the container did not boot again after the reboot (its console is above)"
  fi
  # What nspawn exited with: the first exit noted after the reboot began.
  sed -n 's/^container.sh: systemd-nspawn exited //p' "$state/console.log" | sed -n "$((exits + 1))p" | sed 's/^/nspawn exited /'
  echo "systemd $new"
  ;;
exec)
  state=$1; shift
  [ $# -ge 1 ] || usage
  systemd=$(cat "$state/systemd.pid" 2>/dev/null) || die "$state has no running container"
  alive "$systemd" || die "the container of $state is not running"
  exec nsenter -t "$systemd" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb "$@"
  ;;
pid)
  cat "$1/systemd.pid"
  ;;
stop)
  stop_container "$1"
  ;;
*)
  usage
  ;;
esac
