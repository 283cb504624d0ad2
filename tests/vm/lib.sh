# Shared by the VM checks (sourced: `. "$(dirname "$0")/../lib.sh"`).

# wait_listen PORT PID LOG: waits up to 10 s for a TCP listener on PORT (a
# perftest server's out-of-band socket). If the server PID exits first, or
# time runs out, prints why and LOG and returns 1.
wait_listen() {
    _tries=0
    until ss -Htln "sport = :$1" 2>/dev/null | grep -q .; do
        kill -0 "$2" 2>/dev/null || { echo "server exited before listening on :$1:"; cat "$3"; return 1; }
        _tries=$((_tries + 1))
        [ "$_tries" -lt 100 ] || { echo "server not listening on :$1 after 10 s:"; cat "$3"; return 1; }
        sleep 0.1
    done
}
