#!/usr/bin/env bash
# A private single-host Slurm cluster for tests: two fake nodes n1, n2 on 127.0.0.1.
#
#   scripts/local-slurm.sh up       install slurm-wlm + munge if missing (Debian/Ubuntu, root),
#                                   start munged, slurmctld and two slurmd; wait until both nodes are idle
#   scripts/local-slurm.sh status   sinfo of the cluster; exit 0 when both nodes answer
#   scripts/local-slurm.sh down     cancel its jobs, stop every daemon it started (by pid file)
#   scripts/local-slurm.sh env      the line that points Slurm's commands at this cluster
#   scripts/local-slurm.sh run CMD  best effort: up unless a cluster already answers, run CMD,
#                                   down again if this call brought it up; exits with CMD's status
#
# No systemd: the daemons run from this script (proctrack/linuxproc, task/none, munge with
# its own key and socket). Everything binds to 127.0.0.1 (CommunicationParameters=NoInAddrAny,
# NodeAddr/SlurmctldHost 127.0.0.1) and lives in $PCCL_SLURM_STATE (/var/lib/pccl-slurm).
# The cluster is named "pccl-local"; the test suite runs its Slurm tests only against it.
# /etc/slurm/slurm.conf is linked to this cluster's file only when no slurm.conf is there yet,
# so a machine with a real Slurm is never touched ("up" refuses instead).
set -euo pipefail

STATE=${PCCL_SLURM_STATE:-/var/lib/pccl-slurm}
CONF=$STATE/slurm.conf
SYSTEM_CONF=/etc/slurm/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket.2
CLUSTER=pccl-local
NODES=(n1 n2)
CTLD_PORT=16817
FIRST_SLURMD_PORT=16818
READY_TIMEOUT_S=60

say() { echo "local-slurm: $*"; }
fail() { say "$*" >&2; exit 1; }

slurm_env() { export SLURM_CONF=$CONF; }

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

hostname_is_loopback() {
    local address
    address=$(getent hosts "$(hostname)" | awk '{print $1; exit}')
    case $address in 127.*) return 0 ;; *) return 1 ;; esac
}

write_munge_key() {
    mkdir -p "$STATE/munge"
    chmod 755 "$STATE/munge"
    if [ ! -s "$STATE/munge/munge.key" ]; then
        head -c 1024 /dev/urandom >"$STATE/munge/munge.key"
    fi
    chmod 400 "$STATE/munge/munge.key"
}

node_lines() {
    local index=0 node
    for node in "${NODES[@]}"; do
        # CPUs: slots, not cores (config_overrides): room for a few ranks per fake node
        echo "NodeName=$node NodeHostname=$(hostname -s) NodeAddr=127.0.0.1" \
            "Port=$((FIRST_SLURMD_PORT + index)) CPUs=8 RealMemory=1000 State=UNKNOWN"
        index=$((index + 1))
    done
}

write_conf() {
    mkdir -p "$STATE/ctld" "$STATE/log"
    local node
    for node in "${NODES[@]}"; do mkdir -p "$STATE/spool/$node"; done
    cat >"$CONF" <<EOF
# Written by scripts/local-slurm.sh: a private test cluster on 127.0.0.1 (see that script).
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
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
TaskPlugin=task/none
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

link_system_conf() {
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then
        return 0
    fi
    [ -e "$SYSTEM_CONF" ] && return 0  # checked by refuse_foreign_conf
    mkdir -p "$(dirname "$SYSTEM_CONF")"
    ln -s "$CONF" "$SYSTEM_CONF"
}

refuse_foreign_conf() {
    if [ -e "$SYSTEM_CONF" ] && ! { [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; }; then
        fail "$SYSTEM_CONF exists and is not this script's: a real Slurm is configured here; not touching it"
    fi
}

start_munge() {
    if [ -S "$MUNGE_SOCKET" ] && munge --socket="$MUNGE_SOCKET" -n </dev/null >/dev/null 2>&1; then
        return 0
    fi
    munged --force --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
        --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/log/munged.log" \
        --seed-file="$STATE/munge/munged.seed" --origin=127.0.0.1
}

start_daemons() {
    slurmctld -c -f "$CONF"
    local node
    for node in "${NODES[@]}"; do
        slurmd -c -f "$CONF" -N "$node"
    done
}

nodes_ready() {
    local states
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
    local node
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

up() {
    [ "$(id -u)" = 0 ] || fail "needs root (packages, daemons, $STATE)"
    install_packages
    slurm_env
    if [ -f "$CONF" ] && ctld_alive && nodes_ready; then
        say "already up ($CLUSTER: ${NODES[*]} on 127.0.0.1)"
        return 0
    fi
    refuse_foreign_conf
    hostname_is_loopback || fail "$(hostname) does not resolve to a 127.* address; refusing to bind off loopback"
    stop_daemons
    write_munge_key
    write_conf
    link_system_conf
    if ! { start_munge && start_daemons && wait_ready; }; then
        down >/dev/null
        fail "the cluster did not come up within ${READY_TIMEOUT_S} s; logs in $STATE/log"
    fi
    say "up ($CLUSTER: ${NODES[*]} on 127.0.0.1; SLURM_CONF=$CONF)"
}

pid_files() {
    local node
    for node in "${NODES[@]}"; do echo "$STATE/slurmd-$node.pid"; done
    echo "$STATE/slurmctld.pid"
    echo "$STATE/munge/munged.pid"
}

# The pid recorded in a pid file, if that process still runs and is one of ours (its command line
# names $STATE), so a stale pid file never points this script at someone else's process.
live_pid() {
    local pid
    pid=$(cat "$1" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$STATE" \
        && echo "$pid"
}

ctld_alive() { live_pid "$STATE/slurmctld.pid" >/dev/null; }

# Only the daemons this script started (their pid files): TERM all, KILL what is left after 10 s.
stop_daemons() {
    local file pid pids=() waited=0
    for file in $(pid_files); do
        pid=$(live_pid "$file") && pids+=("$pid") && kill -TERM "$pid" 2>/dev/null
    done
    while [ "${#pids[@]}" -gt 0 ] && [ "$waited" -lt 40 ]; do
        local alive=()
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        pids=("${alive[@]+"${alive[@]}"}")
        [ "${#pids[@]}" -gt 0 ] && sleep 0.25
        waited=$((waited + 1))
    done
    for pid in "${pids[@]+"${pids[@]}"}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for file in $(pid_files); do rm -f "$file"; done
}

down() {
    slurm_env
    if [ -f "$CONF" ] && ctld_alive; then
        timeout 10 scancel --partition=debug >/dev/null 2>&1 || true
    fi
    stop_daemons
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then
        rm -f "$SYSTEM_CONF"
    fi
    say "down"
}

status() {
    [ -f "$CONF" ] || { say "not set up (no $CONF)"; return 1; }
    slurm_env
    ctld_alive || { say "down (no slurmctld running)"; return 1; }
    sinfo -N -o '%N %T %c %P' 2>&1 || return 1
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
    env) echo "export SLURM_CONF=$CONF" ;;
    run) shift; [ "$#" -gt 0 ] || { echo "usage: $0 run CMD [ARGS...]" >&2; exit 2; }; run_with_cluster "$@" ;;
    *) echo "usage: $0 up|down|status|env|run CMD..." >&2; exit 2 ;;
esac
