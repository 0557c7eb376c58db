/* The link emulator's ports (switch.c): an AF_PACKET socket on a switch-side veth end, and when a
 * frame reached it (the kernel's receive stamp). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#include "labhelper.h"

int open_port(struct port *port, const char *name) {
    port->name = name;
    port->head = port->tail = NULL;
    port->fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (port->fd < 0) {
        perror("labhelper switch: socket(AF_PACKET)");
        return -1;
    }
    struct sockaddr_ll where = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                                .sll_ifindex = (int)if_nametoindex(name)};
    if (where.sll_ifindex == 0) {
        fprintf(stderr, "labhelper switch: no interface %s\n", name);
        return -1;
    }
    if (bind(port->fd, (struct sockaddr *)&where, sizeof where) != 0) {
        fprintf(stderr, "labhelper switch: bind %s: %s\n", name, strerror(errno));
        return -1;
    }
    int one = 1, buffer = 8 << 20;
    /* its own sends are not frames to switch; frames for other hosts' MACs must be seen too */
    setsockopt(port->fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    setsockopt(port->fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
    setsockopt(port->fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
    setsockopt(port->fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer);
    setsockopt(port->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    struct packet_mreq promisc = {.mr_ifindex = where.sll_ifindex, .mr_type = PACKET_MR_PROMISC};
    setsockopt(port->fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &promisc, sizeof promisc);
    return 0;
}

/* When the frame reached the switch port: the kernel's receive stamp (CLOCK_REALTIME, moved to
 * CLOCK_MONOTONIC), so the switch's own wake-up latency is not added to the link's delay; 0 where the
 * frame has no usable stamp. */
uint64_t arrival_ns(struct msghdr *message, uint64_t now, int64_t realtime_offset) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(message); c; c = CMSG_NXTHDR(message, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec stamp;
            memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
            int64_t at = (int64_t)stamp.tv_sec * 1000000000ll + stamp.tv_nsec - realtime_offset;
            if (at > 0 && (uint64_t)at <= now)
                return (uint64_t)at;
        }
    }
    return 0;
}

int64_t realtime_minus_monotonic(void) {
    struct timespec real, mono;
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    return ((int64_t)real.tv_sec - mono.tv_sec) * 1000000000ll + (real.tv_nsec - mono.tv_nsec);
}
