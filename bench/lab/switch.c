/* The link emulator of the lab: `labhelper switch` (see labhelper.c for the commands).
 *
 * A learning Ethernet switch on AF_PACKET sockets of the switch-side veth ends. Each frame is
 * stamped with the time it reached the switch (the kernel's receive stamp, so the switch's own
 * wake-up is not added), serialised at the rate on the sender's uplink and on the receiver's
 * downlink, queued, and sent its delay later; ppoll sleeps until the next departure, the last
 * stretch is spun (this machine's measured wake-up latency, or --spin-us). SCHED_FIFO where
 * allowed, so a busy machine does not add its own scheduling delay. Counters, lateness and the
 * receive lag go to the --stats file (JSON) once a second and at the end. The ports (their
 * sockets and the kernel's receive stamps) are switch_port.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#include "labhelper.h"

static int switch_usage(void) {
    fprintf(stderr, "usage: labhelper switch [--delay-us D] [--rate-mbit R] [--queue-bytes Q] [--spin-us S|auto] "
                    "[--stats FILE] PORT...\n");
    return 2;
}

#define MAX_PORTS 64
#define FRAME_BYTES 9216 /* the largest frame: a 9000-byte MTU, its header and a VLAN tag */
#define MAC_TABLE 256
#define LATE_BUCKETS 16 /* lateness histogram: < 1, 2, 4 ... 2^15 us, more */

struct mac_entry {
    unsigned char mac[6];
    int port;
};

static struct port ports[MAX_PORTS];
static int nports;
static struct mac_entry macs[MAC_TABLE];
static int nmacs;
static uint64_t delay_ns, queue_limit = 512 * 1024;
/* how long before a departure the switch stops sleeping and spins: fixed (--spin-us), or the
 * 90th percentile of the last timer wake-ups' overshoot (this machine's wake-up latency) */
static int spin_fixed;
static uint64_t spin_ns = 30000;
#define OVERSHOOTS 128
static uint64_t overshoots[OVERSHOOTS];
static unsigned overshoot_count;
static double ns_per_byte; /* 0: no rate limit */
/* counts by microseconds: < 1, [1, 2), [2, 4) ... [2^14, 2^15), more */
struct histogram {
    uint64_t counts[LATE_BUCKETS + 1];
    uint64_t max_ns, total;
};
/* how late frames left (against their due time), and how long after its arrival stamp the switch
 * read each frame (its wake-up on arrival); frames without a usable stamp are counted apart */
static struct histogram lateness, receive_lag;
static uint64_t unstamped, out_of_memory;
static volatile sig_atomic_t stopping;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void on_stop(int sig) {
    (void)sig;
    stopping = 1;
}

static int port_of_mac(const unsigned char *mac) {
    for (int i = 0; i < nmacs; i++)
        if (memcmp(macs[i].mac, mac, 6) == 0)
            return macs[i].port;
    return -1;
}

static void learn(const unsigned char *mac, int port) {
    if (mac[0] & 1)
        return; /* a group address is never a source */
    for (int i = 0; i < nmacs; i++) {
        if (memcmp(macs[i].mac, mac, 6) == 0) {
            macs[i].port = port;
            return;
        }
    }
    if (nmacs < MAC_TABLE) {
        memcpy(macs[nmacs].mac, mac, 6);
        macs[nmacs++].port = port;
    }
}

/* A frame of `length` bytes on a link idle from `*free_ns`, ready from `ready`: when it has crossed
 * (the link is busy until then), or 0 where the link's backlog is past the queue limit (tail drop). */
static uint64_t serialise(uint64_t *free_ns, uint64_t ready, uint32_t length, uint64_t now) {
    uint64_t start = *free_ns > ready ? *free_ns : ready;
    if (start > now && (double)(start - now) / ns_per_byte > (double)queue_limit)
        return 0;
    *free_ns = start + (uint64_t)(length * ns_per_byte);
    return *free_ns;
}

/* Queue a copy of the frame towards port `to`, leaving no earlier than `ready_ns` (uplink done). */
static void enqueue(int to, const unsigned char *frame, uint32_t length, uint64_t now, uint64_t ready_ns) {
    struct port *out = &ports[to];
    uint64_t depart = ready_ns;
    if (ns_per_byte > 0) {
        depart = serialise(&out->down_free_ns, ready_ns, length, now);
        if (!depart) {
            out->dropped++;
            return;
        }
    } else if (out->queued_bytes + length > queue_limit * 64) {
        out->dropped++; /* no rate: only a runaway backlog is dropped */
        return;
    }
    struct frame *copy = malloc(sizeof *copy + length);
    if (!copy) {
        out_of_memory++;
        out->dropped++;
        return;
    }
    memcpy(copy->data, frame, length);
    copy->length = length;
    copy->depart_ns = depart + delay_ns;
    copy->next = NULL;
    if (out->tail)
        out->tail->next = copy;
    else
        out->head = copy;
    out->tail = copy;
    out->queued_bytes += length;
}

static void note(struct histogram *histogram, uint64_t ns) {
    int bucket = 0;
    uint64_t us = ns / 1000;
    while (us > 0 && bucket < LATE_BUCKETS) {
        us >>= 1;
        bucket++;
    }
    histogram->counts[bucket]++;
    if (ns > histogram->max_ns)
        histogram->max_ns = ns;
    histogram->total++;
}

static void receive(int from, uint64_t now) {
    static unsigned char frame[FRAME_BYTES];
    char control[256];
    struct port *in = &ports[from];
    int64_t offset = realtime_minus_monotonic();
    for (int burst = 0; burst < 64; burst++) {
        struct iovec vector = {.iov_base = frame, .iov_len = sizeof frame};
        struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1, .msg_control = control,
                                 .msg_controllen = sizeof control};
        ssize_t length = recvmsg(in->fd, &message, MSG_DONTWAIT | MSG_TRUNC);
        if (length < 0)
            return;
        uint64_t arrived = arrival_ns(&message, now, offset);
        if (!arrived) {
            unstamped++;
            arrived = now;
        }
        note(&receive_lag, now - arrived);
        if (length < 14 || length > FRAME_BYTES) {
            in->dropped++;
            continue;
        }
        in->rx_frames++;
        in->rx_bytes += (uint64_t)length;
        uint64_t ready = ns_per_byte > 0 ? serialise(&in->up_free_ns, arrived, (uint32_t)length, now) : arrived;
        if (!ready) {
            in->dropped++;
            continue;
        }
        learn(frame + 6, from);
        int to = (frame[0] & 1) ? -1 : port_of_mac(frame);
        if (to == from)
            continue;
        if (to >= 0) {
            enqueue(to, frame, (uint32_t)length, now, ready);
        } else {
            for (int p = 0; p < nports; p++)
                if (p != from)
                    enqueue(p, frame, (uint32_t)length, now, ready);
        }
    }
}


/* Send what is due on every port; the earliest departure still waiting (UINT64_MAX: none). */
static uint64_t send_due(uint64_t now) {
    uint64_t next = UINT64_MAX;
    for (int p = 0; p < nports; p++) {
        struct port *out = &ports[p];
        while (out->head) {
            struct frame *frame = out->head;
            if (frame->depart_ns > now) {
                if (frame->depart_ns < next)
                    next = frame->depart_ns;
                break;
            }
            if (send(out->fd, frame->data, frame->length, MSG_DONTWAIT) < 0) {
                if (errno == EAGAIN || errno == ENOBUFS) { /* the port is full: try again soon */
                    if (now + 10000 < next)
                        next = now + 10000;
                    break;
                }
                out->send_errors++; /* the host went away (its end of the link is gone) */
            } else {
                out->tx_frames++;
                out->tx_bytes += frame->length;
                note(&lateness, now - frame->depart_ns);
            }
            out->head = frame->next;
            if (!out->head)
                out->tail = NULL;
            out->queued_bytes -= frame->length;
            free(frame);
        }
    }
    return next;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void note_overshoot(uint64_t late) {
    overshoots[overshoot_count++ % OVERSHOOTS] = late;
    if (spin_fixed || overshoot_count % 32 != 0 || overshoot_count < OVERSHOOTS)
        return;
    uint64_t sorted[OVERSHOOTS];
    memcpy(sorted, overshoots, sizeof sorted);
    qsort(sorted, OVERSHOOTS, sizeof sorted[0], compare_u64);
    spin_ns = sorted[OVERSHOOTS * 9 / 10] + 2000;
    if (spin_ns > 200000)
        spin_ns = 200000;
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void write_histogram(FILE *file, const char *name, const struct histogram *histogram) {
    fprintf(file, "\"%s\": [", name);
    for (int b = 0; b <= LATE_BUCKETS; b++)
        fprintf(file, "%s%llu", b ? ", " : "", (unsigned long long)histogram->counts[b]);
    fprintf(file, "], ");
}

static void write_stats(const char *path, const char *sched) {
    if (!path)
        return;
    char temp[4096];
    snprintf(temp, sizeof temp, "%s.tmp", path);
    FILE *file = fopen(temp, "w");
    if (!file)
        return;
    fprintf(file, "{\"delay_us\": %.3f, \"rate_mbit\": %.3f, \"queue_bytes\": %llu, \"spin_us\": %.3f, "
                  "\"spin_auto\": %s, \"cpu_s\": %.3f, \"sched\": \"%s\", \"departures\": %llu, "
                  "\"late_max_us\": %.3f, \"unstamped\": %llu, \"out_of_memory\": %llu, ",
            delay_ns / 1e3, ns_per_byte > 0 ? 8e3 / ns_per_byte : 0.0, (unsigned long long)queue_limit,
            spin_ns / 1e3, spin_fixed ? "false" : "true", cpu_seconds(), sched, (unsigned long long)lateness.total,
            lateness.max_ns / 1e3, (unsigned long long)unstamped, (unsigned long long)out_of_memory);
    write_histogram(file, "late_hist_us", &lateness);
    write_histogram(file, "receive_lag_hist_us", &receive_lag);
    fprintf(file, "\"ports\": {");
    for (int p = 0; p < nports; p++) {
        struct port *port = &ports[p];
        fprintf(file, "%s\"%s\": {\"rx_frames\": %llu, \"rx_bytes\": %llu, \"tx_frames\": %llu, \"tx_bytes\": %llu, "
                      "\"dropped\": %llu, \"send_errors\": %llu}",
                p ? ", " : "", port->name, (unsigned long long)port->rx_frames, (unsigned long long)port->rx_bytes,
                (unsigned long long)port->tx_frames, (unsigned long long)port->tx_bytes,
                (unsigned long long)port->dropped, (unsigned long long)port->send_errors);
    }
    fprintf(file, "}}\n");
    fclose(file);
    rename(temp, path);
}

/* The options before the ports into the settings; the index of the first port, or -1 (usage). */
static int parse_options(int argc, char **argv, const char **stats) {
    double rate_mbit = 0;
    int i = 0;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (i + 1 >= argc)
            return -1;
        if (strcmp(argv[i], "--delay-us") == 0)
            delay_ns = (uint64_t)(atof(argv[i + 1]) * 1e3);
        else if (strcmp(argv[i], "--rate-mbit") == 0)
            rate_mbit = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--queue-bytes") == 0)
            queue_limit = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--spin-us") == 0) {
            spin_fixed = strcmp(argv[i + 1], "auto") != 0;
            if (spin_fixed)
                spin_ns = (uint64_t)(atof(argv[i + 1]) * 1e3);
        }
        else if (strcmp(argv[i], "--stats") == 0)
            *stats = argv[i + 1];
        else
            return -1;
    }
    if (i >= argc || argc - i > MAX_PORTS)
        return -1;
    ns_per_byte = rate_mbit > 0 ? 8e3 / rate_mbit : 0;
    return i;
}

/* Real-time scheduling where allowed, a fine timer, memory locked, a clean stop on a signal; the policy. */
static const char *become_realtime(void) {
    const char *sched = "other";
    struct sched_param param = {.sched_priority = 10};
    if (sched_setscheduler(0, SCHED_FIFO, &param) == 0)
        sched = "fifo";
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    mlockall(MCL_CURRENT);
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    return sched;
}

static void receive_ready(struct pollfd *fds, uint64_t now) {
    for (int p = 0; p < nports; p++)
        if (fds[p].revents & POLLIN)
            receive(p, now);
}

int run_switch(int argc, char **argv) {
    const char *stats = NULL;
    int i = parse_options(argc, argv, &stats);
    if (i < 0)
        return switch_usage();
    for (; i < argc; i++)
        if (open_port(&ports[nports++], argv[i]) != 0)
            return 1;
    const char *sched = become_realtime();
    struct pollfd fds[MAX_PORTS];
    for (int p = 0; p < nports; p++)
        fds[p] = (struct pollfd){.fd = ports[p].fd, .events = POLLIN};
    uint64_t next_stats = now_ns() + 1000000000ull;
    write_stats(stats, sched);
    while (!stopping) {
        uint64_t now = now_ns();
        uint64_t next = send_due(now);
        if (now >= next_stats) {
            write_stats(stats, sched);
            next_stats = now + 1000000000ull;
        }
        if (next != UINT64_MAX && next - now <= spin_ns) {
            /* the next departure is close: look for frames without sleeping */
            struct timespec zero = {0, 0};
            if (ppoll(fds, (nfds_t)nports, &zero, NULL) > 0)
                receive_ready(fds, now_ns());
            continue;
        }
        uint64_t wake = next == UINT64_MAX ? now + 1000000000ull : next - spin_ns;
        if (wake > now + 1000000000ull)
            wake = now + 1000000000ull;
        uint64_t wait = wake - now;
        struct timespec timeout = {.tv_sec = (time_t)(wait / 1000000000ull), .tv_nsec = (long)(wait % 1000000000ull)};
        int ready = ppoll(fds, (nfds_t)nports, &timeout, NULL);
        now = now_ns();
        if (ready == 0 && next != UINT64_MAX)
            note_overshoot(now > wake ? now - wake : 0);
        if (ready > 0)
            receive_ready(fds, now);
    }
    write_stats(stats, sched);
    return 0;
}
