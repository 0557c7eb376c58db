"""A lab of network-namespace hosts on one Linux machine (``pccl-bench lab``; docs/LAB.md).

Each host (h1..hN) has its own network, UTS (hostname), IPC, PID and mount namespaces with a
private /dev/shm and a sysfs of its own network, and one veth link into a switch namespace: a
kernel bridge, or the user-space link emulator of ``switch.c`` when a delay or a rate is set.
A ``login`` namespace on the same switch is where launchers run (mpiexec, srun, sbatch); it
shares the machine's PID namespace so that the lab's ssh stand-in (``<state>/rsh``) can enter any
host. Nothing is added to the machine's own network namespace, and everything the lab starts is
found again by the namespaces it lives in and stopped by pid (``down``).

Needs root, unshare/nsenter/setpriv (util-linux), ip (iproute2) and a C compiler.
"""
