/*
 * The lwIP row of `ustack bench`: lwIP (Debian's liblwip, 2.1.x, raw API) on a
 * TAP device, serving the same four services as `ustack serve` in the bench:
 * UDP echo, TCP echo, TCP discard and a TCP source of N pattern bytes.
 *
 * Our own small TAP driver: the main thread blocks in poll() on the TAP fd,
 * reads a burst of frames and hands each to lwIP's Ethernet input while it
 * holds lwIP's core lock; lwIP's own thread (tcpip_init) runs the timers.
 * Transmit is one write() per frame from the netif's linkoutput. Services use
 * the applications' defaults: Nagle on, lwIP's default buffers and windows.
 *
 * Built by ustack.tools.bench_lwip when liblwip-dev is installed:
 *   gcc -O2 $(pkg-config --cflags lwip) lwip_server.c -o lwip_server -llwip -lpthread
 * Usage: lwip_server IFNAME ADDR PREFIXLEN MAC UDP_ECHO TCP_ECHO TCP_DISCARD TCP_SOURCE SOURCE_BYTES [busy]
 * With `busy` the main thread spins on non-blocking reads instead of sleeping in poll()
 * (a whole core, as lwIP's own unix port examples and DPDK-style loops run).
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "lwip/etharp.h"
#include "lwip/init.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/tcp.h"
#include "lwip/tcpip.h"
#include "lwip/udp.h"
#include "netif/ethernet.h"

#define FRAME_MAX 2048
#define RX_BURST 64

static int tap_fd = -1;
static volatile sig_atomic_t stopping;
static unsigned long long source_bytes;
static unsigned char mac[6];
static unsigned char pattern[65536];

/* -- the TAP driver ----------------------------------------------------------------------- */

static err_t tap_linkoutput(struct netif *netif, struct pbuf *p)
{
    unsigned char frame[FRAME_MAX];
    (void)netif;
    if (p->tot_len > sizeof(frame))
        return ERR_BUF;
    u16_t len = pbuf_copy_partial(p, frame, p->tot_len, 0);
    if (write(tap_fd, frame, len) != (ssize_t)len)
        return ERR_IF; /* a full TAP queue drops the frame, as a wire would */
    return ERR_OK;
}

static err_t tap_netif_init(struct netif *netif)
{
    netif->name[0] = 't';
    netif->name[1] = 'p';
    netif->output = etharp_output;
    netif->linkoutput = tap_linkoutput;
    netif->mtu = 1500;
    netif->hwaddr_len = 6;
    memcpy(netif->hwaddr, mac, 6);
    netif->flags = NETIF_FLAG_BROADCAST | NETIF_FLAG_ETHARP | NETIF_FLAG_ETHERNET;
    return ERR_OK;
}

static int tap_open(const char *ifname)
{
    struct ifreq ifr;
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    memset(&ifr, 0, sizeof(ifr));
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* -- TCP services (raw API, called with the core lock held) -------------------------------- */

enum kind { ECHO, DISCARD, SOURCE };

struct conn {
    enum kind kind;
    unsigned long long sent; /* source: bytes queued so far */
    struct pbuf *pending;    /* echo: received data not yet queued for sending */
};

/* Close (or, if lwIP has no memory for the FIN, abort): ERR_ABRT tells a callback's caller the pcb is gone. */
static err_t conn_close(struct tcp_pcb *pcb, struct conn *c)
{
    tcp_arg(pcb, NULL);
    tcp_recv(pcb, NULL);
    tcp_sent(pcb, NULL);
    tcp_err(pcb, NULL);
    if (c) {
        if (c->pending)
            pbuf_free(c->pending);
        free(c);
    }
    if (tcp_close(pcb) == ERR_OK)
        return ERR_OK;
    tcp_abort(pcb);
    return ERR_ABRT;
}

/* Queue as much of the pending echo data as the send buffer takes. */
static void echo_push(struct tcp_pcb *pcb, struct conn *c)
{
    while (c->pending) {
        struct pbuf *q = c->pending;
        u16_t room = tcp_sndbuf(pcb);
        u16_t n = q->len < room ? q->len : room;
        if (n == 0 || tcp_write(pcb, q->payload, n, TCP_WRITE_FLAG_COPY) != ERR_OK)
            break;
        tcp_recved(pcb, n); /* the window reopens as echoed data leaves our hands */
        if (n < q->len) {
            pbuf_remove_header(q, n); /* what is left of this pbuf waits for room */
            break;
        }
        c->pending = q->next;
        if (q->next)
            pbuf_ref(q->next);
        pbuf_free(q);
    }
    tcp_output(pcb);
}

static void source_push(struct tcp_pcb *pcb, struct conn *c)
{
    while (c->sent < source_bytes) {
        unsigned start = (unsigned)(c->sent % 256);
        unsigned long long left = source_bytes - c->sent;
        u16_t room = tcp_sndbuf(pcb);
        unsigned n = sizeof(pattern) - start;
        if (n > left)
            n = (unsigned)left;
        if (n > room)
            n = room;
        if (n == 0 || tcp_write(pcb, pattern + start, n, 0) != ERR_OK)
            break;
        c->sent += n;
    }
    tcp_output(pcb);
}

static err_t on_sent(void *arg, struct tcp_pcb *pcb, u16_t len)
{
    struct conn *c = arg;
    (void)len;
    if (!c)
        return ERR_OK;
    if (c->kind == ECHO) {
        echo_push(pcb, c);
    } else if (c->kind == SOURCE) {
        source_push(pcb, c);
        if (c->sent >= source_bytes && pcb->unsent == NULL && pcb->unacked == NULL) {
            return conn_close(pcb, c);
        }
    }
    return ERR_OK;
}

static err_t on_recv(void *arg, struct tcp_pcb *pcb, struct pbuf *p, err_t err)
{
    struct conn *c = arg;
    (void)err;
    if (p == NULL) { /* the peer's FIN */
        if (c && c->kind == SOURCE && c->sent < source_bytes)
            return ERR_OK; /* keep sending; close when done */
        return conn_close(pcb, c);
    }
    if (!c) {
        pbuf_free(p);
        return ERR_OK;
    }
    if (c->kind == ECHO) {
        if (c->pending)
            pbuf_cat(c->pending, p);
        else
            c->pending = p;
        echo_push(pcb, c);
    } else {
        tcp_recved(pcb, p->tot_len);
        pbuf_free(p);
    }
    return ERR_OK;
}

static void on_err(void *arg, err_t err)
{
    struct conn *c = arg; /* the pcb is already freed */
    (void)err;
    if (c) {
        if (c->pending)
            pbuf_free(c->pending);
        free(c);
    }
}

static err_t on_accept(void *arg, struct tcp_pcb *pcb, err_t err)
{
    struct conn *c;
    if (err != ERR_OK || pcb == NULL)
        return ERR_VAL;
    c = calloc(1, sizeof(*c));
    if (!c)
        return ERR_MEM;
    c->kind = (enum kind)(long)arg;
    tcp_arg(pcb, c);
    tcp_recv(pcb, on_recv);
    tcp_sent(pcb, on_sent);
    tcp_err(pcb, on_err);
    if (c->kind == SOURCE)
        source_push(pcb, c);
    return ERR_OK;
}

static int tcp_service(int port, enum kind kind)
{
    struct tcp_pcb *pcb = tcp_new(), *lst;
    if (!pcb || tcp_bind(pcb, IP_ADDR_ANY, (u16_t)port) != ERR_OK)
        return -1;
    lst = tcp_listen_with_backlog(pcb, 255);
    if (!lst)
        return -1;
    tcp_arg(lst, (void *)(long)kind);
    tcp_accept(lst, on_accept);
    return 0;
}

static void on_udp(void *arg, struct udp_pcb *pcb, struct pbuf *p, const ip_addr_t *addr, u16_t port)
{
    (void)arg;
    udp_sendto(pcb, p, addr, port);
    pbuf_free(p);
}

/* -- main ---------------------------------------------------------------------------------- */

static sem_t started;

static void tcpip_started(void *arg)
{
    (void)arg;
    sem_post(&started);
}

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

int main(int argc, char **argv)
{
    static struct netif netif;
    static unsigned char frames[RX_BURST][FRAME_MAX];
    ip4_addr_t addr, mask, gw;
    struct udp_pcb *udp;
    struct sigaction sa;
    int prefixlen, i;

    int busy = argc == 11 && strcmp(argv[10], "busy") == 0;
    if (argc != 10 && !busy) {
        fprintf(stderr, "usage: %s IFNAME ADDR PREFIXLEN MAC UDP_ECHO TCP_ECHO TCP_DISCARD TCP_SOURCE SOURCE_BYTES [busy]\n",
                argv[0]);
        return 2;
    }
    prefixlen = atoi(argv[3]);
    if (!ip4addr_aton(argv[2], &addr) || prefixlen < 1 || prefixlen > 32 ||
        sscanf(argv[4], "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5]) != 6) {
        fprintf(stderr, "lwip_server: bad address, prefix length or MAC\n");
        return 2;
    }
    source_bytes = strtoull(argv[9], NULL, 10);
    for (i = 0; i < (int)sizeof(pattern); i++)
        pattern[i] = (unsigned char)i;
    ip4_addr_set_u32(&mask, lwip_htonl(0xffffffffUL << (32 - prefixlen)));
    ip4_addr_set_zero(&gw);

    tap_fd = tap_open(argv[1]);
    if (tap_fd < 0) {
        fprintf(stderr, "lwip_server: cannot open TAP %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    sem_init(&started, 0, 0);
    tcpip_init(tcpip_started, NULL);
    sem_wait(&started);

    LOCK_TCPIP_CORE();
    netif_add(&netif, &addr, &mask, &gw, NULL, tap_netif_init, ethernet_input);
    netif_set_default(&netif);
    netif_set_link_up(&netif);
    netif_set_up(&netif);
    udp = udp_new();
    if (!udp || udp_bind(udp, IP_ADDR_ANY, (u16_t)atoi(argv[5])) != ERR_OK ||
        tcp_service(atoi(argv[6]), ECHO) || tcp_service(atoi(argv[7]), DISCARD) ||
        tcp_service(atoi(argv[8]), SOURCE)) {
        UNLOCK_TCPIP_CORE();
        fprintf(stderr, "lwip_server: cannot set up the services\n");
        return 1;
    }
    udp_recv(udp, on_udp, NULL);
    UNLOCK_TCPIP_CORE();
    printf("lwip: %s on %s (lwIP %s, raw API, own TAP driver)\nready\n", argv[2], argv[1], LWIP_VERSION_STRING);
    fflush(stdout);

    while (!stopping) {
        struct pollfd pfd = {.fd = tap_fd, .events = POLLIN};
        ssize_t lens[RX_BURST];
        int n = 0;
        if (!busy && poll(&pfd, 1, 500) <= 0)
            continue;
        while (n < RX_BURST) {
            lens[n] = read(tap_fd, frames[n], FRAME_MAX);
            if (lens[n] <= 0)
                break;
            n++;
        }
        if (n == 0)
            continue;
        LOCK_TCPIP_CORE();
        for (i = 0; i < n; i++) {
            struct pbuf *p = pbuf_alloc(PBUF_RAW, (u16_t)lens[i], PBUF_RAM);
            if (!p)
                continue; /* out of memory: dropped, as a NIC would */
            pbuf_take(p, frames[i], (u16_t)lens[i]);
            if (netif.input(p, &netif) != ERR_OK)
                pbuf_free(p);
        }
        UNLOCK_TCPIP_CORE();
    }
    return 0;
}
