/* wake_probe: the smallest user-space ICMP echo responder, to measure what waking a sleeping process
 * costs on this machine (issue 10, the spaced ping). Used by tools/bench_wake.py.
 *
 * It answers ARP requests and ICMP echo requests for one IPv4 address on one interface through an
 * AF_PACKET socket, with no stack at all: swap the addresses, type 0, two checksums, send(). Modes:
 *   sleep   poll(2) on the socket between requests (what a sleeping server pays: the wake-up)
 *   spin    non-blocking recv(2) in a loop (no wake-up; a whole CPU)
 * At SIGTERM it prints the median duration of its send(2) calls on stderr.
 *
 * usage: wake_probe IFNAME IPV4 sleep|spin SECONDS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SENDS 65536

static volatile sig_atomic_t stop;
static long sends[MAX_SENDS];
static int nsends;

static void on_term(int sig) { (void)sig; stop = 1; }

static uint16_t checksum(const uint8_t *p, int n) {  /* RFC 1071 */
    uint32_t s = 0;
    for (int i = 0; i + 1 < n; i += 2) s += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (n & 1) s += (uint32_t)p[n - 1] << 8;
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static void timed_send(int fd, const uint8_t *buf, size_t n) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (send(fd, buf, n, 0) < 0) perror("send");
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (nsends < MAX_SENDS) sends[nsends++] = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s IFNAME IPV4 sleep|spin SECONDS\n", argv[0]); return 2; }
    int spin = strcmp(argv[3], "spin") == 0;
    uint32_t me = inet_addr(argv[2]);
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    struct sockaddr_ll sll = {0};
    struct ifreq ifr = {0};
    uint8_t mac[6], buf[2048], tmp[10];
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = (int)if_nametoindex(argv[1]);
    strncpy(ifr.ifr_name, argv[1], IFNAMSIZ - 1);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0 || ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) {
        perror("wake_probe: socket/bind/SIOCGIFHWADDR");
        return 1;
    }
    memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
    signal(SIGTERM, on_term);
    time_t end = time(NULL) + atoi(argv[4]);
    struct pollfd pfd = {fd, POLLIN, 0};
    printf("ready\n");
    fflush(stdout);
    while (!stop && time(NULL) < end) {
        if (!spin && poll(&pfd, 1, 500) <= 0) continue;
        ssize_t n = recv(fd, buf, sizeof buf, spin ? MSG_DONTWAIT : 0);
        if (n < 42) continue;
        if (buf[12] == 0x08 && buf[13] == 0x06 && buf[21] == 1 && memcmp(buf + 38, &me, 4) == 0) {
            /* ARP request for our address (RFC 826): the reply, from our MAC */
            memcpy(buf, buf + 6, 6);
            memcpy(buf + 6, mac, 6);
            buf[21] = 2;
            memcpy(tmp, buf + 22, 10);  /* sender MAC + IP become the target's */
            memcpy(buf + 32, tmp, 10);
            memcpy(buf + 22, mac, 6);
            memcpy(buf + 28, &me, 4);
            timed_send(fd, buf, 42);
            continue;
        }
        if (buf[12] != 0x08 || buf[13] != 0 || (buf[14] >> 4) != 4 || buf[23] != 1 || memcmp(buf + 30, &me, 4))
            continue;
        int ihl = (buf[14] & 15) * 4, total = buf[16] << 8 | buf[17];
        if (ihl < 20 || total > n - 14 || total < ihl + 8 || buf[14 + ihl] != 8) continue;
        memcpy(tmp, buf, 6);  /* Ethernet and IPv4 addresses swapped */
        memcpy(buf, buf + 6, 6);
        memcpy(buf + 6, tmp, 6);
        memcpy(tmp, buf + 26, 4);
        memcpy(buf + 26, buf + 30, 4);
        memcpy(buf + 30, tmp, 4);
        buf[24] = buf[25] = 0;
        uint16_t c = checksum(buf + 14, ihl);
        buf[24] = (uint8_t)(c >> 8);
        buf[25] = (uint8_t)c;
        uint8_t *icmp = buf + 14 + ihl;  /* Echo Reply (RFC 792): type 0, code 0, fresh checksum */
        icmp[0] = icmp[1] = icmp[2] = icmp[3] = 0;
        c = checksum(icmp, total - ihl);
        icmp[2] = (uint8_t)(c >> 8);
        icmp[3] = (uint8_t)c;
        timed_send(fd, buf, (size_t)(14 + total));
    }
    qsort(sends, (size_t)nsends, sizeof sends[0], cmp_long);
    fprintf(stderr, "send() median %ld ns over %d\n", nsends ? sends[nsends / 2] : 0L, nsends);
    return 0;
}
