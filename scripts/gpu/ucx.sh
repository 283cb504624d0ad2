#!/usr/bin/env bash
# UCX (issue 16) on the GPU machine (2x H200), in one device call.
#   Prepare on a developer machine: bash scripts/gpu/ucx-carry.sh
#   Device call: carry ["dist", ".whl/ucx-gpu.zip", ".whl/nixl-gpu.zip"],
#                command "bash scripts/gpu/ucx.sh" (kind nvidia-h200-x2).
# Steps, each under a time limit so the whole stays inside the 10-minute
# command limit; every outcome, failures included, is written down:
#  1. env.txt: GPUs, topology, kernel, the wheel's ucx_info -v and devices;
#  2. validate.txt: `gdrtrace validate` (pin-churn, cuda-copy, the NCCL
#     modes, and UCX: host-tcp, host-shm, cuda, cuda-no-ipc with the wheel's
#     ucx_perftest): per mode the verdict against UCX's own protocol lines
#     (UCX_PROTO_INFO=y), sends and bytes against the perftest's Final line,
#     staged bytes within 1% of what it moved (cuda-no-ipc);
#  3. run-MODE.*: both CUDA modes again under `gdrtrace run --ucx-log`, whole
#     reports and `explain`;
#  4. attach-MODE.*: the same modes attached mid-run (cuda-no-ipc first):
#     the verdict of the first interval record;
#  5. nixl*: a NIXL (nixl-cu13 1.5.1) WRITE between the two GPUs through its
#     UCX backend, traced, or why it could not run (nixl-outcome.txt);
#  6. summary.txt. Everything lands in $OUT/ucx-results.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/dist/gdrtrace
R=/tmp/gdr-ucx
U=/tmp/ucx-wheel
N=/tmp/nixl-wheel
BUDGET=${BUDGET:-560}   # seconds for everything, under the 600 s command limit
rm -rf "$R" "$U" "$N"
mkdir -p "$R"
# Seconds a step may take: at most $1, and what the budget leaves (minus 15 s).
limit() {
    local left=$((BUDGET - SECONDS - 15))
    [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
step() { # NAME MAX_SECONDS: true when the step may start
    if [ "$(limit "$2")" -lt 20 ]; then
        echo "$1: not run: the time budget is spent ($SECONDS s of $BUDGET s)" | tee -a "$R/skipped.txt"
        return 1
    fi
    echo "== $1 ($(limit "$2") s, at $SECONDS s)"
}

mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
# python3's zipfile, in case unzip is not installed there; it drops modes.
python3 -m zipfile -e .whl/ucx-gpu.zip "$U" && chmod +x "$U"/libucx/bin/* || echo "ucx-gpu.zip: could not unpack" >> "$R/skipped.txt"
# The wheel's binaries find its libraries through LD_LIBRARY_PATH (no RPATH);
# NIXL's own UCX copy has other file names, so it is not affected.
export PATH="$U/libucx/bin:$PATH" LD_LIBRARY_PATH="$U/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
    nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv
    nvidia-smi topo -m
    uname -r
    ucx_info -v
    ucx_info -d | grep -E "Memory domain|Transport|Device"
    "$B" --version
} > "$R/env.txt" 2>&1

if step validate 330; then
    timeout "$(limit 330)" "$B" validate --json "$R/validate.json" > "$R/validate.txt" 2>&1
    echo "rc=$?" >> "$R/validate.txt"
fi

# One GPU: both processes on it, and no IPC mode (a copy inside one GPU
# crosses no link); NIXL's transfer between two GPUs is not run.
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
if [ "$NGPU" -ge 2 ]; then MODES="cuda-no-ipc cuda"; GPUS=0,1; else MODES="cuda-no-ipc"; GPUS=0,0; fi
echo "gpus=$NGPU modes=$MODES" >> "$R/env.txt"
for m in $MODES; do
    step "run $m" 60 || continue
    timeout "$(limit 60)" "$B" run --json "$R/run-$m.json" --ucx-log "$R/run-$m.log" -- \
        "$B" drive ucx --mode "$m" --gpus "$GPUS" --size 64M --iterations 100 --log "$R/run-$m.log" \
        --summary "$R/run-$m.summary.json" > "$R/run-$m.txt" 2>&1
    echo "rc=$?" >> "$R/run-$m.txt"
    "$B" explain "$R/run-$m.json" --ucx-log "$R/run-$m.log" > "$R/explain-$m.txt" 2>&1
done

for m in $MODES; do
    step "attach $m" 45 || continue
    # A long perftest in its own process group (killed as a group after).
    setsid "$B" drive ucx --mode "$m" --gpus "$GPUS" --size 64M --iterations 1000000 --timeout 90s \
        --log "$R/job-$m.log" > "$R/job-$m.txt" 2>&1 &
    J=$!
    sleep 12   # UCX wire-up and the first transfers happen before the tracer comes
    timeout "$(limit 30)" "$B" attach --pid "$J" --interval 1s --duration 5s \
        --jsonl "$R/attach-$m.jsonl" --json "$R/attach-$m.json" > "$R/attach-$m.txt" 2>&1
    echo "rc=$?" >> "$R/attach-$m.txt"
    kill -- -"$J" 2>/dev/null
    wait "$J" 2>/dev/null
done

if step nixl 120; then
    if ! python3 -m zipfile -e .whl/nixl-gpu.zip "$N" 2> "$R/nixl-import.txt"; then
        echo "not run: .whl/nixl-gpu.zip could not be unpacked: $(tail -n 1 "$R/nixl-import.txt")" > "$R/nixl-outcome.txt"
    elif ! PYTHONPATH="$N" python3 -c "import nixl_cu13, torch; assert torch.cuda.device_count() >= 2, 'fewer than 2 GPUs'" \
        >> "$R/nixl-import.txt" 2>&1; then
        echo "not run: $(tail -n 1 "$R/nixl-import.txt")" > "$R/nixl-outcome.txt"
    else
        UCX_PROTO_INFO=y UCX_LOG_LEVEL=info PYTHONPATH="$N" timeout "$(limit 120)" \
            "$B" run --json "$R/nixl.json" --ucx-log "$R/nixl/ucx.log" -- \
            python3 scripts/gpu/nixl_xfer.py run --dir "$R/nixl" --memory vram --size 64M --iterations 50 \
            > "$R/nixl.txt" 2>&1
        rc=$?
        if [ "$rc" -eq 0 ]; then
            echo "ran: $(tail -c 400 "$R/nixl/summary.json" | tr -d '\n')" > "$R/nixl-outcome.txt"
        else
            echo "failed (rc=$rc): $(grep -v '^\[' "$R/nixl.txt" | grep -iE 'error|fail|exception' | head -n 3 | tr '\n' ' ')" \
                > "$R/nixl-outcome.txt"
        fi
    fi
fi

python3 - "$R" > "$R/summary.txt" 2>&1 <<'PY'
import json, os, sys
R = sys.argv[1]
def load(p):
    try:
        return json.load(open(os.path.join(R, p)))
    except Exception as e:
        return None
print("== validate (UCX part)")
try:
    text = open(os.path.join(R, "validate.txt")).read().splitlines()
    start = next((i for i, l in enumerate(text) if l.startswith("validate: ucx")), None)
    for l in (text[start:] if start is not None else []):
        if l.startswith(("validate: ucx", "  ")) and ("FAIL" in l or "MODE" in l or l.startswith("  cuda") or l.startswith("  host")):
            print(l)
    print("\n".join(l for l in text if l.startswith("validate:") and "checks passed" in l))
    print(text[-1])
except OSError as e:
    print("validate: no output:", e)
for m in ("cuda-no-ipc", "cuda"):
    r, s = load(f"run-{m}.json"), load(f"run-{m}.summary.json")
    print(f"== run {m}")
    if not r or not s:
        print("  no report"); continue
    for p in (r.get("ucx") or {}).get("processes", []):
        role = "client" if p["pid"] == s["client_pid"] else "server" if p["pid"] == s["server_pid"] else "other"
        for x in p["paths"]:
            log = x.get("log") or {}
            print(f"  {role} pid {p['pid']}: {x['memory']} {x['transport']} via {x['path']}; staged {x['staged_bytes']} of {s['bytes']} moved "
                  f"({100.0 * x['staged_bytes'] / max(s['bytes'], 1):.2f}%); sends {p['data_calls']}/{s['iterations']}; "
                  f"UCX log: {log.get('ucx_says', '-')} ({'agrees' if log.get('agrees') else 'no agreement' if log else 'none'})")
    print(f"  perftest {s['bandwidth_mb_s']:.0f} MB/s; explain findings: {[f['rule'] for f in r['explain']['findings']]}")
for m in ("cuda-no-ipc", "cuda"):
    print(f"== attach {m}")
    try:
        first = json.loads(open(os.path.join(R, f"attach-{m}.jsonl")).readline())
    except Exception as e:
        print("  no interval record:", e); continue
    for p in first["processes"]:
        if p["comm"] == "ucx_perftest":
            print(f"  first interval at {first['elapsed_s']:.1f} s: pid {p['pid']} {p.get('verdict')} {p.get('why') or ''} staged {p['staged_bytes_per_s']:.0f} B/s")
    r = load(f"attach-{m}.json")
    for v in (r or {}).get("verdicts", []):
        print(f"  final: pid {v['pid']} {v['transport']}: {v['evidence'][1:3]}")
print("== nixl")
try:
    print(" ", open(os.path.join(R, "nixl-outcome.txt")).read().strip())
except OSError:
    print("  no outcome recorded")
r = load("nixl.json")
for p in (r or {}).get("ucx", {}).get("processes", []):
    for x in p["paths"]:
        print(f"  pid {p['pid']} {p['comm']}: {x['memory']} {x['transport']} via {x['path']}; data {p['data_calls']} calls {p['data_bytes']} B; "
              f"UCX log: {(x.get('log') or {}).get('agrees')}")
try:
    print("== skipped\n" + open(os.path.join(R, "skipped.txt")).read())
except OSError:
    pass
PY
echo "elapsed $SECONDS s" >> "$R/summary.txt"
cat "$R/summary.txt"
tar czf "$OUT/ucx-results.tgz" -C "$R" . 2>/dev/null || tar czf "$OUT/ucx-results.tgz" -C "$R" --exclude='*.log' .
cp "$R/summary.txt" "$OUT/summary.txt"
