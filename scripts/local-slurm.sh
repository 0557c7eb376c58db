#!/usr/bin/env bash
# A private Slurm cluster for tests, on real (namespace) nodes: the lab "slurm" of pccl-bench
# (docs/LAB.md) with two hosts n1, n2, each with its own hostname, address, IPC, PID and mount
# namespaces; slurmctld and munged on its login host, one slurmd on each node.
#
#   scripts/local-slurm.sh up        install slurm-wlm + munge if missing (Debian/Ubuntu, root),
#                                    bring up the lab and the daemons; wait until both nodes are idle
#   scripts/local-slurm.sh status    sinfo of the cluster; exit 0 when both nodes answer
#   scripts/local-slurm.sh exec CMD  run CMD on the login host, pointed at this cluster (srun, sbatch,
#                                    salloc, pccl-bench run sweep --launcher srun ...)
#   scripts/local-slurm.sh down      cancel its jobs, stop every process of the lab (by pid), the lab
#   scripts/local-slurm.sh run CMD   best effort: up unless the cluster already answers, run CMD (here,
#                                    in this namespace: tests reach the cluster through `exec`), down
#                                    again if this call brought it up; exits with CMD's status
#
# No systemd: the daemons run from this script (proctrack/linuxproc, task/cgroup + task/affinity as
# the sites, munge with its own key and socket). Nothing listens outside the lab's namespaces, and
# /etc/slurm is never touched: every Slurm command gets SLURM_CONF. State lives in $PCCL_SLURM_STATE
# (/var/lib/pccl-slurm). GPU GRES (gres/gpu) on both nodes, stand-in device files under
# $STATE/dev: what Slurm sets in a GPU step (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES) and which
# device files its cgroup lets a task open are real (tests/bench/driver/test_slurm_gpus.py).
# The cluster is named "pccl-local"; the test suite runs its Slurm tests only against it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${PCCL_SLURM_STATE:-/var/lib/pccl-slurm}
CONF=$STATE/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket.2
CLUSTER=pccl-local
LAB=slurm
NODES=(n1 n2)
# GPU GRES per node (stand-in device files, nothing opens them): n1 a Perlmutter-like node (4 GPUs),
# n2 a Frontier-like one (8 GCDs); CPUs per node as many as those sites' steps ask for (-c 32 x 4,
# -c 7 x 8), slots only: the kernel intersects a task's mask with this machine's CPUs
declare -A NODE_GPUS=([n1]=4 [n2]=8)
declare -A NODE_CPUS=([n1]=128 [n2]=64)
# as NERSC and OLCF: cgroups (ConstrainCores, ConstrainDevices: a task opens only its step's GPUs)
# and affinity; PCCL_SLURM_TASK_PLUGIN=task/affinity or task/none to compare
# (where cgroup v1's devices controller is mounted writable; else affinity alone)
if [ -w /sys/fs/cgroup/devices ] && [ -w /sys/fs/cgroup/cpuset ]; then
    TASK_PLUGIN=${PCCL_SLURM_TASK_PLUGIN:-task/cgroup,task/affinity}
else
    TASK_PLUGIN=${PCCL_SLURM_TASK_PLUGIN:-task/affinity}
fi
READY_TIMEOUT_S=60
PY=${PCCL_PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3

say() { echo "local-slurm: $*"; }
fail() { say "$*" >&2; exit 1; }

lab() { PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m bench lab "$@" --lab "$LAB"; }
# CMD on a lab host (login, n1, n2) with this cluster's configuration
on() {
    local host=$1
    shift
    PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m bench lab exec --lab "$LAB" "$host" -- \
        env SLURM_CONF="$CONF" "$@"
}

installed() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null \
        && command -v sbatch >/dev/null && command -v munged >/dev/null
}

install_packages() {
    installed && return 0
    [ "$(id -u)" = 0 ] || fail "Slurm is not installed and installing it needs root"
    command -v apt-get >/dev/null || fail "Slurm is not installed and there is no apt-get here"
    say "installing slurm-wlm and munge (apt-get; log in $STATE/apt.log)"
    mkdir -p "$STATE"
    export DEBIAN_FRONTEND=noninteractive
    local apt=(timeout 300 apt-get -o DPkg::Lock::Timeout=60 -qq)
    if ! { "${apt[@]}" update && "${apt[@]}" install -y --no-install-recommends slurmd slurmctld slurm-client munge; } \
        >"$STATE/apt.log" 2>&1; then
        fail "apt-get failed; see $STATE/apt.log"
    fi
}

write_munge_key() {
    mkdir -p "$STATE/munge"
    chmod 755 "$STATE/munge"
    if [ ! -s "$STATE/munge/munge.key" ]; then
        head -c 1024 /dev/urandom >"$STATE/munge/munge.key"
    fi
    chmod 400 "$STATE/munge/munge.key"
}

# the lab's addresses (bench/lab/state.py): login 10.77.0.2, the nodes from 10.77.0.11
node_lines() {
    local index=0 node
    for node in "${NODES[@]}"; do
        # CPUs: slots, not cores (config_overrides)
        echo "NodeName=$node NodeHostname=$node NodeAddr=10.77.0.$((11 + index)) CPUs=${NODE_CPUS[$node]}" \
            "Gres=gpu:${NODE_GPUS[$node]} RealMemory=1000 State=UNKNOWN"
        index=$((index + 1))
    done
}

# gres.conf: each node's GPUs as character devices under $STATE/dev/<node> (NVIDIA's major 195; no
# driver behind them: opening one gives ENXIO), AutoDetect=off: slurmd takes the list as given.
# Regular files will not do: slurmd logs "... is not a valid character or block device, fix your
# gres.conf" and every task gets CUDA_VISIBLE_DEVICES empty
write_gres() {
    local node gpu files
    : >"$STATE/gres.conf"
    echo "AutoDetect=off" >>"$STATE/gres.conf"
    for node in "${NODES[@]}"; do
        rm -rf "$STATE/dev/$node"
        mkdir -p "$STATE/dev/$node"
        for ((gpu = 0; gpu < NODE_GPUS[$node]; gpu++)); do
            mknod "$STATE/dev/$node/nvidia$gpu" c 195 "$gpu" \
                || fail "mknod $STATE/dev/$node/nvidia$gpu failed: Slurm's GPU GRES needs character devices"
        done
        files="$STATE/dev/$node/nvidia[0-$((NODE_GPUS[$node] - 1))]"
        echo "NodeName=$node Name=gpu File=$files" >>"$STATE/gres.conf"
    done
    # read by task/cgroup (cgroup v1 here: /sys/fs/cgroup/<controller>/slurm_<node>)
    printf 'CgroupPlugin=cgroup/v1\nConstrainCores=yes\nConstrainDevices=yes\n' >"$STATE/cgroup.conf"
}

write_conf() {
    rm -rf "$STATE/ctld" "$STATE/spool"
    mkdir -p "$STATE/ctld" "$STATE/log"
    local node
    for node in "${NODES[@]}"; do mkdir -p "$STATE/spool/$node"; done
    cat >"$CONF" <<EOF
# Written by scripts/local-slurm.sh: a private test cluster on the namespace nodes of the lab "$LAB".
ClusterName=$CLUSTER
SlurmctldHost=login(10.77.0.2)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=$TASK_PLUGIN
GresTypes=gpu
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
InactiveLimit=0
# sbatch --wait polls every 2 s while MinJobAge/2 <= 2 (else 2, 8, 32 s ...)
MinJobAge=5
SlurmctldTimeout=30
SlurmdTimeout=30
$(node_lines)
PartitionName=debug Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
}

start_daemons() {
    on login munged --force --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
        --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/log/munged.log" \
        --seed-file="$STATE/munge/munged.seed"
    on login slurmctld -c -f "$CONF"
    local node
    for node in "${NODES[@]}"; do
        on "$node" slurmd -c -f "$CONF"
    done
}

nodes_ready() {
    local states node
    states=$(on login sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
    for node in "${NODES[@]}"; do
        echo "$states" | grep -Eq "^$node (idle|allocated|mixed|completing)" || return 1
    done
}

wait_ready() {
    local waited=0
    until nodes_ready; do
        [ "$waited" -ge $((READY_TIMEOUT_S * 2)) ] && return 1
        sleep 0.5
        waited=$((waited + 1))
    done
}

lab_up() { lab status >/dev/null 2>&1; }

up() {
    [ "$(id -u)" = 0 ] || fail "needs root (packages, namespaces, daemons, $STATE)"
    install_packages
    if [ -f "$CONF" ] && lab_up && nodes_ready; then
        say "already up ($CLUSTER: ${NODES[*]} in the lab $LAB)"
        return 0
    fi
    lab down >/dev/null 2>&1 || true
    lab up "${#NODES[@]}" --prefix n >/dev/null || fail "the lab did not come up (pccl-bench lab up)"
    write_munge_key
    write_conf
    (write_gres) || { down >/dev/null; exit 1; }
    if ! { start_daemons && wait_ready; }; then
        down >/dev/null
        fail "the cluster did not come up within ${READY_TIMEOUT_S} s; logs in $STATE/log"
    fi
    say "up ($CLUSTER: ${NODES[*]} in the lab $LAB; scripts/local-slurm.sh exec CMD reaches it)"
}

down() {
    if [ -f "$CONF" ] && lab_up; then
        timeout 10 "$0" exec scancel --partition=debug >/dev/null 2>&1 || true
    fi
    lab down >/dev/null 2>&1 || true
    # task/cgroup leaves its (empty) per-node folders behind
    local node
    for node in "${NODES[@]}"; do
        find /sys/fs/cgroup/*/"slurm_$node" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    say "down"
}

status() {
    [ -f "$CONF" ] || { say "not set up (no $CONF)"; return 1; }
    lab_up || { say "down (the lab $LAB is not up)"; return 1; }
    on login sinfo -N -o '%N %T %c %P' 2>&1 || return 1
    nodes_ready
}

# Tests that need Slurm skip where it is not up; CMD runs either way.
run_with_cluster() {
    local started=0 rc=0
    if ! status >/dev/null 2>&1; then
        if (up); then started=1; else say "not started: the Slurm tests will skip"; fi
    fi
    [ "$started" = 1 ] && trap '(down) || true' EXIT
    "$@" || rc=$?
    return "$rc"
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    exec) shift; [ "$#" -gt 0 ] || { echo "usage: $0 exec CMD [ARGS...]" >&2; exit 2; }; on login "$@" ;;
    run) shift; [ "$#" -gt 0 ] || { echo "usage: $0 run CMD [ARGS...]" >&2; exit 2; }; run_with_cluster "$@" ;;
    *) echo "usage: $0 up|down|status|exec CMD...|run CMD..." >&2; exit 2 ;;
esac
