/* The lab's compiled helper (bench/lab/; `pccl-bench lab up` compiles labhelper.c and switch.c
 * with the system cc into the lab's state folder).
 *
 *   labhelper init                  pid 1 of a lab host: reaps orphans; SIGTERM/SIGINT end it,
 *                                   and with it (the kernel's rule for a PID namespace) the host
 *   labhelper offload IFACE...      turn off checksum and segmentation offloads of IFACE, so
 *                                   every frame leaves whole, with its checksum, as a wire sees it
 *   labhelper switch [--delay-us D] [--rate-mbit R] [--queue-bytes Q] [--spin-us S|auto]
 *                    [--stats FILE] PORT...
 *                                   the link emulator (switch.c): a learning Ethernet switch in
 *                                   user space between the ports (the switch-side veth ends),
 *                                   adding D us one way and R Mbit/s per host link (uplink and
 *                                   downlink), tail drop past Q bytes of queue per link. This
 *                                   kernel has no netem: delay needs a program of its own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "labhelper.h"

static int usage(void) {
    fprintf(stderr, "usage: labhelper init | offload IFACE... | switch [--delay-us D] [--rate-mbit R] "
                    "[--queue-bytes Q] [--spin-us S] [--stats FILE] PORT...\n");
    return 2;
}

/* ---------------------------------------------------------------- init */

static int run_init(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig != SIGCHLD)
            return 0;
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
    }
}

/* ---------------------------------------------------------------- offload */

static int set_feature(int fd, const char *iface, uint32_t cmd) {
    struct ethtool_value value = {.cmd = cmd, .data = 0};
    struct ifreq request;
    memset(&request, 0, sizeof request);
    snprintf(request.ifr_name, IFNAMSIZ, "%s", iface);
    request.ifr_data = (char *)&value;
    return ioctl(fd, SIOCETHTOOL, &request);
}

static int run_offload(int argc, char **argv) {
    /* Segmentation first: the kernel refuses to turn checksums off under TSO on some drivers. */
    static const struct { uint32_t cmd; const char *name; } features[] = {
        {ETHTOOL_STSO, "tso"}, {ETHTOOL_SGSO, "gso"}, {ETHTOOL_SGRO, "gro"},
        {ETHTOOL_STXCSUM, "tx-checksum"}, {ETHTOOL_SSG, "scatter-gather"},
    };
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("labhelper offload: socket");
        return 1;
    }
    int failed = 0;
    for (int i = 0; i < argc; i++) {
        for (size_t f = 0; f < sizeof features / sizeof features[0]; f++) {
            if (set_feature(fd, argv[i], features[f].cmd) != 0 && errno != EOPNOTSUPP) {
                fprintf(stderr, "labhelper offload: %s %s off: %s\n", argv[i], features[f].name, strerror(errno));
                failed = 1;
            }
        }
    }
    close(fd);
    return failed;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return usage();
    if (strcmp(argv[1], "init") == 0)
        return run_init();
    if (strcmp(argv[1], "offload") == 0)
        return run_offload(argc - 2, argv + 2);
    if (strcmp(argv[1], "switch") == 0)
        return run_switch(argc - 2, argv + 2);
    return usage();
}
