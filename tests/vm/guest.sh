#!/bin/sh
# Guest side of `cargo xtask vm-test`: runs inside a virtme-ng VM as root, from
# the repository root, on the host's (read-only) root filesystem.
#
# Environment (set by vm-test; vm-run passes them with --out/--env):
#   VM_OUT    writable output directory (target/vm-results/<release>/)
#   GDRTRACE  absolute path of the gdrtrace binary under test
#   CHECK_TIMEOUT  seconds each check may run (default 300)
#   VM_CHECKS      optional space-separated check names or name prefixes
#                  (e.g. "00-rxe 1"); only matching checks run
#   WAIT_FOR       optional file whose existence the checks wait for (the
#                  VM booted before the binary was built), at most
#                  WAIT_LIMIT seconds
#
# Sets up the kernel side (tracefs, soft-RoCE device rxe0 on lo), records the
# kernel's identity, then runs tests/vm/checks/*.sh in lexical order. Each
# check gets VM_OUT and GDRTRACE, runs from the repository root, and its
# output goes to $VM_OUT/check-NAME.log. Executable checks run directly (so
# their shebang counts), others with /bin/sh. A failing check fails the run;
# the remaining checks still run.
set -eu

: "${VM_OUT:?VM_OUT must be set}"
: "${GDRTRACE:?GDRTRACE must be set}"
CHECK_TIMEOUT=${CHECK_TIMEOUT:-300}
export VM_OUT GDRTRACE CHECK_TIMEOUT

here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$VM_OUT"
rm -f "$VM_OUT/summary.txt"

die() {
    echo "guest: $*" >&2
    echo "0 passed, 1 failed" > "$VM_OUT/summary.txt"
    exit 1
}

is_mounted() { # MOUNTPOINT FSTYPE
    awk -v m="$1" -v t="$2" '$2 == m && $3 == t { f = 1 } END { exit !f }' /proc/mounts
}

# --- kernel interfaces ------------------------------------------------------
is_mounted /sys/kernel/tracing tracefs ||
    mount -t tracefs nodev /sys/kernel/tracing || die "cannot mount tracefs"
is_mounted /sys/kernel/debug debugfs ||
    mount -t debugfs nodev /sys/kernel/debug || echo "guest: note: debugfs not mounted" >&2
is_mounted /sys/kernel/security securityfs ||
    mount -t securityfs nodev /sys/kernel/security 2>/dev/null || true

# --- soft-RoCE on loopback ---------------------------------------------------
ip link set lo up || die "cannot bring lo up"
modprobe rdma_rxe || die "modprobe rdma_rxe failed"
if ! rdma link show rxe0/1 >/dev/null 2>&1; then
    rdma link add rxe0 type rxe netdev lo || die "rdma link add rxe0 failed"
fi
i=0
until ibv_devices 2>/dev/null | awk '$1 == "rxe0" { f = 1 } END { exit !f }'; do
    i=$((i + 1))
    [ "$i" -lt 20 ] || die "ibv_devices does not list rxe0"
    sleep 0.5
done

# --- identity of this kernel -------------------------------------------------
uname -r > "$VM_OUT/uname.txt"
if [ -r /sys/kernel/security/lockdown ]; then
    cat /sys/kernel/security/lockdown > "$VM_OUT/lockdown.txt"
else
    echo "unavailable" > "$VM_OUT/lockdown.txt"
fi
ls /sys/kernel/btf > "$VM_OUT/btf.txt" 2>/dev/null || echo "unavailable" > "$VM_OUT/btf.txt"
rdma link show > "$VM_OUT/rdma-link.txt" 2>&1 || true
echo "guest: kernel $(uname -r), up $(cut -d' ' -f1 /proc/uptime)s, lockdown: $(cat "$VM_OUT/lockdown.txt"), btf: $(wc -l < "$VM_OUT/btf.txt") objects"

# --- the binary, when the VM booted before it was built ------------------------
if [ -n "${WAIT_FOR:-}" ]; then
    echo "guest: waiting for $WAIT_FOR"
    waited=0
    until [ -e "$WAIT_FOR" ]; do
        [ "$waited" -lt "${WAIT_LIMIT:-1800}" ] || die "$WAIT_FOR did not appear in ${waited}s"
        sleep 2
        waited=$((waited + 2))
    done
    echo "guest: $WAIT_FOR is there after ${waited}s"
fi
[ -x "$GDRTRACE" ] || die "$GDRTRACE is missing or not executable"

# --- checks --------------------------------------------------------------------
passed=0
failed=0
for check in "$here"/checks/*.sh; do
    [ -e "$check" ] || continue
    name=$(basename "$check" .sh)
    if [ -n "${VM_CHECKS:-}" ]; then
        selected=0
        for pat in $VM_CHECKS; do
            case "$name" in "$pat"*) selected=1 ;; esac
        done
        [ "$selected" -eq 1 ] || continue
    fi
    log="$VM_OUT/check-$name.log"
    if [ -x "$check" ]; then
        set -- "$check"
    else
        set -- sh "$check"
    fi
    t0=$(date +%s)
    echo "check $name: started"
    if timeout "$CHECK_TIMEOUT" "$@" > "$log" 2>&1; then
        passed=$((passed + 1))
        echo "check $name: ok ($(($(date +%s) - t0))s)"
    else
        rc=$?
        failed=$((failed + 1))
        echo "check $name: FAILED (exit $rc after $(($(date +%s) - t0))s; last lines of $log:)"
        tail -n 30 "$log" | sed 's/^/    /'
    fi
done

echo "$passed passed, $failed failed" | tee "$VM_OUT/summary.txt"
[ "$failed" -eq 0 ]
