#!/bin/sh
# Soft-RoCE sanity: an ib_write_bw pair over rxe0 completes in the guest.
# Env: VM_OUT (output dir). Port override: RXE_PORT.
set -eu

port=${RXE_PORT:-18515}
args="-d rxe0 -s 65536 -n 200 -F -p $port"
srv_log="$VM_OUT/00-rxe-server.log"
cli_log="$VM_OUT/00-rxe-client.log"

. "$(dirname "$0")/../lib.sh"

start_server() {
    # shellcheck disable=SC2086
    timeout 120 ib_write_bw $args > "$srv_log" 2>&1 &
    srv=$!
    wait_listen "$port" "$srv" "$srv_log"
}

attempt=1
while :; do
    start_server
    # shellcheck disable=SC2086
    if timeout 120 ib_write_bw $args 127.0.0.1 > "$cli_log" 2>&1; then
        break
    fi
    echo "client attempt $attempt failed:"
    cat "$cli_log"
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    attempt=$((attempt + 1))
    [ "$attempt" -le 3 ] || { echo "ib_write_bw client failed 3 times"; exit 1; }
    sleep 1
done

if ! wait "$srv"; then
    echo "ib_write_bw server failed:"
    cat "$srv_log"
    exit 1
fi

# The result row: "#bytes #iterations BW peak BW average MsgRate".
result=$(awk '$1 == 65536 && $2 == 200 { print; f = 1 } END { exit !f }' "$cli_log") || {
    echo "no result row in client output:"
    cat "$cli_log"
    exit 1
}
echo "ib_write_bw rxe0 ok: $result"
