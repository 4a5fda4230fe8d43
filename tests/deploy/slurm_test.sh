#!/usr/bin/env bash
# A real one-node Slurm cluster on this host runs deploy/slurm/osprey.sbatch for the default job
# (configs/local-curve.yaml: CURVE on, CPU workers) and the job's report shows it trained.
#
# Starts munged, slurmctld and slurmd itself (in the foreground modes, by pid, state in a temp
# dir, free ports), waits for the node to be idle, submits, waits (bounded) for the job to end,
# checks $JOB_DIR/report.json, then stops the daemons by pid. Installs nothing: the packages come
# from deploy/install-deps.sh. Any daemon that cannot start is a FAILURE (with its log), never a
# skip: the sbatch script is what it tests.
#   usage: slurm_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1
BIN=$2
T=$(mktemp -d /tmp/osprey-slurm-test.XXXXXX)
chmod 0755 "$T"
PIDS=()
LOGS=()
stop_all() {
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[$i]}" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
}
fail() {
  echo "slurm_test: FAILED: $*" >&2
  for l in "${LOGS[@]}"; do
    [ -f "$l" ] && { echo "---- last 30 lines of $l ----" >&2; tail -n 30 "$l" >&2; }
  done
  stop_all
  echo "slurm_test: state kept in $T" >&2
  exit 1
}
trap 'stop_all; exit 1' TERM INT HUP

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s.
wait_for() {
  local secs=$1 what=$2
  shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "$what (waited $secs s)"
    sleep 0.2
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for p in munged mungekey slurmctld slurmd sbatch sinfo scontrol srun; do
  command -v "$p" >/dev/null || PATH=$PATH:/usr/sbin:/sbin
  command -v "$p" >/dev/null || fail "$p is not installed (deploy/install-deps.sh installs munge, slurmctld, slurmd, slurm-client)"
done
USER_NAME=$(id -un)
NODE=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)

# munge: a fresh key (0600), socket, log and seed under $T.
mkdir -m 0700 "$T/munge"
mungekey --create --keyfile="$T/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 0600 "$T/munge/munge.key"
LOGS+=("$T/munge/munged.log")
munged -F -f --key-file="$T/munge/munge.key" --socket="$T/munge/munge.sock" \
  --pid-file="$T/munge/munged.pid" --log-file="$T/munge/munged.log" \
  --seed-file="$T/munge/munged.seed" >"$T/munge/stdout.log" 2>&1 &
PIDS+=($!)
LOGS+=("$T/munge/stdout.log")
wait_for 20 "munged did not create its socket" test -S "$T/munge/munge.sock"

CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
mkdir -p "$T/ctld" "$T/slurmd" "$T/submit"
export SLURM_CONF=$T/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=osprey-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$USER_NAME
SlurmdUser=$USER_NAME
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/munge.sock
StateSaveLocation=$T/ctld
SlurmdSpoolDir=$T/slurmd
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=osprey Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
LOGS+=("$T/slurmctld.log" "$T/slurmctld.out")
slurmctld -D -i -f "$SLURM_CONF" >"$T/slurmctld.out" 2>&1 &
PIDS+=($!)
LOGS+=("$T/slurmd.log" "$T/slurmd.out")
slurmd -D -N "$NODE" -f "$SLURM_CONF" >"$T/slurmd.out" 2>&1 &
PIDS+=($!)
node_idle() { sinfo -h -N -n "$NODE" -o '%t' | grep -qx idle; }
wait_for 90 "the node never became idle (sinfo: $(sinfo -h -N 2>&1 | head -2))" node_idle
echo "slurm_test: one-node cluster up ($NODE, $CPUS CPUs; slurmctld port $CTLD_PORT)"

JOB_DIR=$T/submit/job
OSPREY_PORT=$(free_port)
JOB=$(cd "$T/submit" && sbatch --parsable -o "$T/submit/job.out" \
  --export=ALL,OSPREY_BIN="$BIN",OSPREY_JOB_DIR="$JOB_DIR",OSPREY_HOST=127.0.0.1,OSPREY_PORT="$OSPREY_PORT",OSPREY_GPUS_PER_NODE=0 \
  "$SRC/deploy/slurm/osprey.sbatch" "$SRC/configs/local-curve.yaml") || fail "sbatch refused the script"
LOGS+=("$T/submit/job.out" "$JOB_DIR/coordinator.log" "$JOB_DIR/worker-0.log" "$JOB_DIR/server-0.log")
echo "slurm_test: submitted job $JOB"
job_state() { scontrol show job "$JOB" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_ended() { case $(job_state) in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) return 0 ;; esac; return 1; }
wait_for 600 "job $JOB did not end (state $(job_state))" job_ended
STATE=$(job_state)
[ "$STATE" = COMPLETED ] || fail "job $JOB ended $STATE"
cat "$T/submit/job.out"

python3 - "$JOB_DIR/report.json" <<'PY' || fail "the job's report is not that of a trained default job"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["steps"] == 1000, r["steps"]
assert r["auc"] is not None and r["auc"] > 0.7, r["auc"]
assert r["oracle_auc"] is not None and r["auc"] <= r["oracle_auc"] + 0.01, r
assert r["server_reports"] == 2, r["server_reports"]
print("slurm_test: report: AUC %.4f (oracle %.4f), %d steps, %.0f samples/s" %
      (r["auc"], r["oracle_auc"], r["steps"], r["samples_per_sec"]))
PY
# Ranks come from the Slurm task ids (--rank): task t's log is server t's.
for t in 0 1; do
  grep -q "server $t of 2 serving on" "$JOB_DIR/server-$t.log" ||
    fail "server task $t did not register as rank $t (--rank \$SLURM_PROCID)"
done
grep -q "security: curve" "$JOB_DIR/coordinator.log" ||
  fail "the coordinator's log does not say it ran with CURVE"
stop_all
rm -rf "$T"
echo "slurm_test: OK"
