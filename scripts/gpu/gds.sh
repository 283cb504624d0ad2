#!/usr/bin/env bash
# Issue 45 on one GPU, in one device call (about 3 minutes): which path
# each cuFile I/O took, on a machine without nvidia-fs (compat mode).
#   0. the udev entry cuFile needs there (that VM has no udev database:
#      without it cuFileHandleRegister fails, "udev property not found:
#      ID_FS_USAGE"); nvidia-fs state, doctor and topo;
#   1. `gdrtrace run --record` of `gdrtrace drive gds` (64 MiB x 8 written
#      and read back through cuFileWrite/cuFileRead, O_DIRECT, ext4);
#   2. `gdrtrace run --record` of scripts/gpu/gds_xfer.py --mode torch
#      (torch.cuda.gds.GdsFile: torch's own libcufile);
#   3. `gdrtrace attach --pid` for 6 s to `drive gds --seconds 10` (the
#      same writes and reads, then 4 KiB reads in a loop);
#   3a, 3b. `gdrtrace attach --pid` to `drive gds` and to the torch job of
#      2 after their set-up and before their I/O (`--start-after`): every
#      byte in the window;
#   4. `gdrtrace replay` of the recordings of 1 and 2 (same file paths?);
#   5. `gdrtrace serve` while `drive gds` and then the torch job of 2 run
#      untraced by run, /metrics scraped once after them
#      (gdrtrace_path_* with peer_kind="file");
#   6. `explain --cufile-log` of 1 with cuFile's own log.
# Expected: every file path `compat (POSIX through host memory)`,
# host-staged, cause "nvidia-fs not loaded", bytes within 5% of what the
# job moved, in run, attach, replay and serve.
# The binary is built on the development machine (`cargo build --release
# -p tracer`) and carried as dist/gdrtrace; no Rust toolchain is needed here.
# Usage (repository root): [GDRTRACE=BIN] bash scripts/gpu/gds.sh
# Read: $OUT/gds.txt (also printed); everything else in $OUT/gds.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
R=/tmp/gdr-gds
OUT=${OUT:-/tmp/gdr-gds-out}
rm -rf "$R"; mkdir -p "$R" "$OUT"
S="$OUT/gds.txt"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
# The data files live on the root filesystem (ext4), in a directory of their own.
D=/var/tmp/gdr-gds-data
rm -rf "$D"; mkdir -p "$D"

# 0. The udev entry of the root filesystem's block device (changes nothing else).
dev=$(mountpoint -d /)
mkdir -p /run/udev/data
[ -e "/run/udev/data/b$dev" ] || printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n' > "/run/udev/data/b$dev"
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__)'
  "$B" --version
  echo "root device $dev: $(tr '\n' ' ' < "/run/udev/data/b$dev")"
  echo "nvidia_fs module: $(grep -c '^nvidia_fs ' /proc/modules) devices: $(ls /dev/nvidia-fs* 2>/dev/null | wc -l)"
  ls /usr/local/cuda*/targets/x86_64-linux/lib/libcufile.so* 2>/dev/null
} > "$S" 2>&1
"$B" doctor > "$R/doctor.txt" 2>&1; echo "doctor rc=$?" >> "$S"
"$B" topo > "$R/topo.txt" 2>&1; echo "topo rc=$?" >> "$S"
grep -iE "gds|nvidia-fs|p2pdma|cufile" "$R/doctor.txt" "$R/topo.txt" >> "$S"

# cuFile writes cufile.log in its working directory: one per part.
part() { mkdir -p "$R/$1"; cd "$R/$1" || exit 1; }

echo "== 1. run: drive gds" >> "$S"
part run-drive
timeout 120 "$B" run --json "$R/run-drive.json" --record "$R/run-drive.rec" -- \
  "$B" drive gds --file "$D/drive.bin" --size 64M --iterations 8 --summary "$R/run-drive.summary.json" \
  > "$R/run-drive.txt" 2>&1
echo "rc=$?" >> "$S"; grep -E "^gds:" "$R/run-drive.txt" >> "$S"

echo "== 2. run: gds_xfer.py --mode torch (torch.cuda.gds)" >> "$S"
part run-torch
timeout 120 "$B" run --json "$R/run-torch.json" --record "$R/run-torch.rec" -- \
  python3 "$HERE/gds_xfer.py" --mode torch --file "$D/torch.bin" --size 64M --iterations 8 \
  > "$R/run-torch.txt" 2>&1
echo "rc=$?" >> "$S"; grep -E '^\{"mode"' "$R/run-torch.txt" | tee "$R/run-torch.summary.json" >> "$S"

echo "== 3. attach to drive gds --seconds 10" >> "$S"
part attach
"$B" drive gds --file "$D/attach.bin" --size 64M --iterations 8 --seconds 10 --block 4K \
  --summary "$R/attach.summary.json" > "$R/attach-job.txt" 2>&1 &
job=$!
sleep 2
timeout 60 "$B" attach --pid "$job" --duration 6s --json "$R/attach.json" > "$R/attach.txt" 2>&1
echo "attach rc=$?" >> "$S"
wait "$job"; echo "job rc=$?" >> "$S"; grep -E "^gds:" "$R/attach-job.txt" >> "$S"

echo "== 3a. attach to drive gds after its set-up, before its I/O" >> "$S"
part attach-drive
"$B" drive gds --file "$D/attach-drive.bin" --size 64M --iterations 8 --start-after 3s \
  --summary "$R/attach-drive.summary.json" > "$R/attach-drive-job.txt" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "gds: ready" "$R/attach-drive-job.txt" && break; sleep 0.1; done
timeout 60 "$B" attach --pid "$job" --duration 8s --json "$R/attach-drive.json" > "$R/attach-drive.out" 2>&1
echo "attach rc=$?" >> "$S"
wait "$job"; echo "job rc=$?" >> "$S"; grep -E "^gds:" "$R/attach-drive-job.txt" >> "$S"

echo "== 3b. attach to torch.cuda.gds after its set-up, before its I/O" >> "$S"
part attach-torch
python3 "$HERE/gds_xfer.py" --mode torch --file "$D/attach-torch.bin" --size 64M --iterations 8 \
  --start-after 3 > "$R/attach-torch.txt" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "gds_xfer: ready" "$R/attach-torch.txt" && break; sleep 0.1; done
timeout 60 "$B" attach --pid "$job" --duration 8s --json "$R/attach-torch.json" > "$R/attach-torch.out" 2>&1
echo "attach rc=$?" >> "$S"
wait "$job"; echo "job rc=$?" >> "$S"
grep -E '^\{"mode"' "$R/attach-torch.txt" | tee "$R/attach-torch.summary.json" >> "$S"

echo "== 4. replay of 1 and 2" >> "$S"
cd "$R" || exit 1
timeout 60 "$B" replay "$R/run-drive.rec" --json "$R/replay.json" > "$R/replay.txt" 2>&1
echo "rc=$?" >> "$S"
timeout 60 "$B" replay "$R/run-torch.rec" --json "$R/replay-torch.json" > "$R/replay-torch.txt" 2>&1
echo "rc=$?" >> "$S"

echo "== 5. serve, scraped once after drive gds" >> "$S"
PORT=9466
"$B" serve --listen 127.0.0.1:$PORT --exited-retention 600s 2> "$R/serve.err" &
agent=$!
for _ in $(seq 300); do grep -q "serving metrics" "$R/serve.err" && break; sleep 0.1; done
part serve
timeout 120 "$B" drive gds --file "$D/serve.bin" --size 64M --iterations 8 --summary "$R/serve.summary.json" \
  > "$R/serve-job.txt" 2>&1
echo "job rc=$?" >> "$S"
timeout 120 python3 "$HERE/gds_xfer.py" --mode torch --file "$D/serve-torch.bin" --size 64M --iterations 8 \
  > "$R/serve-torch.txt" 2>&1
echo "torch job rc=$?" >> "$S"
sleep 3
python3 -c 'import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=20).read())' \
  "$PORT" "$R/metrics.txt" 2>> "$S"
kill -INT $agent 2>/dev/null; wait $agent 2>/dev/null
grep -E '^gdrtrace_path_[a-z_]*\{.*peer_kind="file"' "$R/metrics.txt" >> "$S"
cd "$R" || exit 1

echo "== 6. explain --cufile-log (1)" >> "$S"
"$B" explain "$R/run-drive.json" --cufile-log "$R/run-drive/cufile.log" > "$R/explain.txt" 2>&1
echo "rc=$?" >> "$S"; grep -iE "gds-|cuFile's log|compat" "$R/explain.txt" | head -20 >> "$S"

# The file paths of each report against what its job moved (within 5%?).
python3 - "$R" >> "$S" 2>&1 <<'PY'
import json, os, sys
r = sys.argv[1]
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        return {"error": str(e)}
def moved(p):
    s = load(p)
    return s.get("pid"), s.get("bytes_written", 0), s.get("bytes_read", 0) + s.get("loop_bytes", 0)
print("== file paths (report: op via transport bytes staged | moved | cause)")
for name, summ in [("run-drive", "run-drive.summary.json"), ("run-torch", "run-torch.summary.json"),
                   ("attach", "attach.summary.json"), ("attach-drive", "attach-drive.summary.json"),
                   ("attach-torch", "attach-torch.summary.json"),
                   ("replay", "run-drive.summary.json"), ("replay-torch", "run-torch.summary.json")]:
    rep = load(os.path.join(r, name + ".json"))
    pid, w, rd = moved(os.path.join(r, summ))
    paths = [p for p in rep.get("paths", []) if p.get("peer_kind") == "file"]
    if not paths:
        print(f"{name}: NO file paths ({rep.get('error', '')})")
    for p in paths:
        want = w if "write" in p.get("op", "") else rd
        within = abs(p.get("bytes", 0) - want) <= 0.05 * want if want else None
        print(f"{name}: pid {p.get('pid')} (job {pid}) {p.get('op')} {p.get('via')} {p.get('transport')} "
              f"bytes {p.get('bytes')} staged {p.get('staged_bytes')} | moved {want} within5%={within} | "
              f"{(p.get('cause') or '')[:90]}")
    g = (rep.get("gds") or {}).get("processes", [])
    for x in g:
        print(f"{name}: gds pid {x.get('pid')} driver opens {x.get('driver_opens')} errors {x.get('driver_errors')}")
PY
tar czf "$OUT/gds.tgz" -C "$R" . 2>/dev/null
cp "$R/run-drive.json" "$OUT/run-drive.json" 2>/dev/null
cat "$S"
