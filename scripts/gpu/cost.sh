#!/usr/bin/env bash
# Issue 25 on one H200, in one device call (about 9 minutes): what the
# tracer costs busy torch jobs, measured the way docs/perf.md says (ratios
# inside one call, interleaved, order alternating), and whether the trap
# budget holds after a process's first second over it.
#   1. `bench uprobe-hit`: one probed entry on this machine;
#   2. the 8 KiB pinned copy loop (overhead.py --job copies): `attach`
#      1 s on/off pairs with an off/off control; `run` whole-job rounds
#      (3 s loops);
#   3. the one-rank 8 KiB all-reduce loop (4 s jobs): `run` rounds with the
#      default `auto`, then with `exact` (the per-trap cost on torch's own
#      libnccl), each against untraced jobs;
#   3b. part gds-attach: a 4 KiB cuFileRead loop (overhead.py --job gds,
#      compat mode without nvidia-fs), `attach` on/off pairs and a control;
#      part gds-run (not in the default PARTS): `run` rounds of the same
#      loop, with the most traps in a second after the first over budget;
#   4. parts allreduce-modes and copies-modes (not in the default PARTS):
#      whole jobs off, auto, exact, a fixed 250ms/4s cycle and off again in
#      each round, the order rotated (MODES), with the off/off control.
# Every traced `run` round keeps its recording: the most traps any process
# counted in a second after its first second over budget comes from it.
# The binary is built on the development machine (`cargo build --release
# -p tracer`) and carried as dist/gdrtrace.
# Usage: [GDRTRACE=BIN] [PAIRS=16] [CONTROL=4] [ROUNDS=8] [PARTS="hit copies-attach ..."] bash scripts/gpu/cost.sh
#   PARTS picks the parts to run (default: all), RUN_LIMIT the seconds of copies-run,
#   AR_LIMIT those of each all-reduce part; COPY_SECS (3) and AR_SECS (4) the
#   jobs' lengths, EXACT_ROUNDS the rounds of allreduce-exact (ROUNDS).
# Read: $OUT/cost.txt.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${GDRTRACE:-$PWD/dist/gdrtrace}
HERE=$PWD/scripts/gpu
R=/tmp/gdr-cost
OUT=${OUT:-/tmp/gdr-cost-out}
rm -rf "$R"; mkdir -p "$R" "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
S="$OUT/cost.txt"
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  nproc; "$B" --version; } > "$S" 2>&1
ROUNDS=${ROUNDS:-8}

PARTS=${PARTS:-hit copies-attach gds-attach copies-run allreduce-auto allreduce-exact}
part() { # NAME TIMEOUT overhead.py-args...
  local name=$1 limit=$2
  shift 2
  case " $PARTS " in *" $name "*) ;; *) return 0 ;; esac
  local t0
  t0=$(date +%s)
  timeout "$limit" python3 "$HERE/overhead.py" bench --gdrtrace "$B" --out "$R/$name" --ngpu 1 "$@" \
    > "$R/$name.txt" 2>&1
  echo "== $name (rc=$?, $(( $(date +%s) - t0 )) s)" >> "$S"
  grep -E "^(attach|run|trap|modes)" "$R/$name.txt" | grep -vE "^(run|trap) round" >> "$S"
  grep -E "^(run|trap) round .*count error" "$R/$name.txt" | sed 's/^/  /' >> "$S"
}

case " $PARTS " in *" hit "*) "$B" bench uprobe-hit --calls 200000 --rounds 3 > "$R/hit.json" 2>> "$S" ;; esac
part copies-attach 105 --job copies --parts attach --pairs "${PAIRS:-16}" --control "${CONTROL:-4}" --window 1.0
# cuFile (issue 45): 4 KiB reads in compat mode; the udev entry cuFile needs
# on a machine without a udev database (see scripts/gpu/gds.sh).
case " $PARTS " in *" gds-attach "* | *" gds-run "*)
  dev=$(mountpoint -d /); mkdir -p /run/udev/data
  [ -e "/run/udev/data/b$dev" ] || printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n' > "/run/udev/data/b$dev" ;;
esac
part gds-attach 105 --job gds --parts attach --pairs "${PAIRS:-16}" --control "${CONTROL:-4}" --window 1.0
part gds-run "${RUN_LIMIT:-120}" --job gds --parts run --rounds "$ROUNDS" --window "${GDS_SECS:-3}"
part copies-run "${RUN_LIMIT:-120}" --job copies --parts run --rounds "$ROUNDS" --window "${COPY_SECS:-3}"
part allreduce-auto "${AR_LIMIT:-175}" --job allreduce --parts run --rounds "$ROUNDS" --window "${AR_SECS:-4}" --sizes 8K
part allreduce-modes "${AR_LIMIT:-175}" --job allreduce --parts modes --rounds "$ROUNDS" --window "${AR_SECS:-4}" --modes "${MODES:-off,auto,exact,250ms/4s,off}"
part copies-modes "${RUN_LIMIT:-120}" --job copies --parts modes --rounds "$ROUNDS" --window "${COPY_SECS:-3}" --modes "${MODES:-off,auto,exact,250ms/4s,off}"
part allreduce-exact "${AR_LIMIT:-170}" --job allreduce --parts run --rounds "${EXACT_ROUNDS:-$ROUNDS}" --window "${AR_SECS:-4}" --sizes 8K --collectives exact
# The recordings travel gzipped (about 25 KB a 4 s job): which phases
# counted a second's peak is read from them.
find "$R" -name '*.rec' -exec gzip -f {} +
tar czf "$OUT/cost.tgz" -C "$R" . 2>/dev/null
cat "$S"
