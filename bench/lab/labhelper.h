/* What labhelper.c, switch.c and switch_port.c share. */
#ifndef PCCL_LABHELPER_H
#define PCCL_LABHELPER_H

#include <stdint.h>
#include <sys/socket.h>

/* `labhelper switch ARGS...`: the link emulator (switch.c); its exit status */
int run_switch(int argc, char **argv);

struct frame {
    uint64_t depart_ns;
    uint32_t length;
    struct frame *next; /* the next frame of the same port's queue */
    unsigned char data[];
};

struct port {
    const char *name;
    int fd;
    struct frame *head, *tail; /* the queue towards this port, in departure order */
    uint64_t up_free_ns, down_free_ns; /* when the uplink (from the host) and downlink are idle */
    uint64_t queued_bytes;
    uint64_t rx_frames, rx_bytes, tx_frames, tx_bytes, dropped, send_errors;
};

/* Open the switch's port on interface `name` (promiscuous, stamped, its own sends ignored); 0 or -1. */
int open_port(struct port *port, const char *name);
/* When the frame of `message` reached the port, on CLOCK_MONOTONIC; 0 where it has no usable stamp. */
uint64_t arrival_ns(struct msghdr *message, uint64_t now, int64_t realtime_offset);
int64_t realtime_minus_monotonic(void);

#endif
