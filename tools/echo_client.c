/* echo_client: a TCP echo load generator for ustack's program matrix (ustack.tools.bench_matrix).
 *
 *   echo_client HOST PORT CONNECTIONS SECONDS SIZE [WARMUP_SECONDS]
 *
 * Opens CONNECTIONS connections to HOST:PORT (IPv4 literal), then on each one
 * in turn: write SIZE bytes (a pattern that differs per request), read until
 * the SIZE bytes come back, check them byte for byte, start the next request
 * at once (closed loop, one request in flight per connection). One thread,
 * epoll, non-blocking sockets, TCP_NODELAY off (the kernel's defaults: the
 * client is not tuned either). Requests during the first WARMUP_SECONDS (default
 * 0.5) are not counted. Prints one line:
 *
 *   requests N seconds S rps R p50_us A p99_us B errors E
 *
 * Latency runs from the request's first write to its last byte echoed.
 * An error (a refused connect, a reset, EOF, a byte that differs) ends the run
 * with exit status 1 after printing the line with errors > 0.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct conn {
    int fd;
    size_t sent, got;
    uint32_t serial;
    double started;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static unsigned char pattern_byte(uint32_t serial, size_t i) { return (unsigned char)(serial * 31u + i * 7u); }

static size_t size_;
static unsigned char *sendbuf, *recvbuf;

static void fill(uint32_t serial) {
    for (size_t i = 0; i < size_; i++) sendbuf[i] = pattern_byte(serial, i);
}

/* write what is left of the current request; 0 ok (maybe partial), -1 error */
static int pump_send(struct conn *c) {
    fill(c->serial);
    while (c->sent < size_) {
        ssize_t n = send(c->fd, sendbuf + c->sent, size_ - c->sent, MSG_NOSIGNAL);
        if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
        c->sent += (size_t)n;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s HOST PORT CONNECTIONS SECONDS SIZE [WARMUP_SECONDS]\n", argv[0]);
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]), nconn = atoi(argv[3]);
    double seconds = atof(argv[4]), warmup = argc > 6 ? atof(argv[6]) : 0.5;
    size_ = (size_t)atol(argv[5]);
    if (port <= 0 || port > 65535 || nconn <= 0 || nconn > 4096 || !(seconds > 0) || size_ == 0 ||
        size_ > (16u << 20) || warmup < 0) {
        fprintf(stderr, "echo_client: bad arguments\n");
        return 2;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "echo_client: HOST must be an IPv4 literal\n");
        return 2;
    }
    sendbuf = malloc(size_);
    recvbuf = malloc(size_);
    struct conn *conns = calloc((size_t)nconn, sizeof *conns);
    size_t cap = 1 << 16, count = 0;
    double *lat = malloc(cap * sizeof *lat);
    int ep = epoll_create1(0);
    if (!sendbuf || !recvbuf || !conns || !lat || ep < 0) return 2;
    unsigned long errors = 0;
    for (int i = 0; i < nconn; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            fprintf(stderr, "echo_client: connect: %s\n", strerror(errno));
            errors++;
            goto out;
        }
        /* non-blocking after a blocking connect (the connections are all up before the clock starts) */
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u32 = (uint32_t)i};
        conns[i].fd = fd;
        conns[i].serial = (uint32_t)i * 100003u;
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    double t0 = now_s(), measure_from = t0 + warmup, end = measure_from + seconds;
    for (int i = 0; i < nconn; i++) {
        conns[i].started = now_s();
        if (pump_send(&conns[i])) { errors++; goto out; }
    }
    struct epoll_event evs[256];
    double now = t0;
    while (now < end) {
        int n = epoll_wait(ep, evs, 256, 100);
        if (n < 0) {
            if (errno == EINTR) continue;
            errors++;
            break;
        }
        now = now_s();
        for (int k = 0; k < n; k++) {
            struct conn *c = &conns[evs[k].data.u32];
            if (evs[k].events & (EPOLLERR | EPOLLHUP)) { errors++; goto done; }
            if (c->sent < size_ && pump_send(c)) { errors++; goto done; }
            for (;;) {
                ssize_t r = recv(c->fd, recvbuf, size_ - c->got, 0);
                if (r == 0) { fprintf(stderr, "echo_client: EOF from the server\n"); errors++; goto done; }
                if (r < 0) {
                    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                    fprintf(stderr, "echo_client: recv: %s\n", strerror(errno));
                    errors++;
                    goto done;
                }
                for (ssize_t i = 0; i < r; i++)
                    if (recvbuf[i] != pattern_byte(c->serial, c->got + (size_t)i)) {
                        fprintf(stderr, "echo_client: byte %zu differs\n", c->got + (size_t)i);
                        errors++;
                        goto done;
                    }
                c->got += (size_t)r;
                if (c->got == size_) { /* one request done: record it, start the next */
                    double t = now_s();
                    if (c->started >= measure_from && t <= end) {
                        if (count == cap) {
                            cap *= 2;
                            double *bigger = realloc(lat, cap * sizeof *lat);
                            if (!bigger) { errors++; goto done; }
                            lat = bigger;
                        }
                        lat[count++] = (t - c->started) * 1e6;
                    }
                    c->serial++;
                    c->sent = c->got = 0;
                    c->started = t;
                    if (pump_send(c)) { errors++; goto done; }
                }
            }
        }
    }
done:
out:;
    double p50 = 0, p99 = 0;
    if (count) {
        qsort(lat, count, sizeof *lat, cmp_double);
        p50 = lat[count / 2];
        p99 = lat[(size_t)(count * 0.99) < count ? (size_t)(count * 0.99) : count - 1];
    }
    printf("requests %zu seconds %.3f rps %.1f p50_us %.1f p99_us %.1f errors %lu\n", count, seconds,
           count / seconds, p50, p99, errors);
    for (int i = 0; i < nconn; i++)
        if (conns[i].fd > 0) close(conns[i].fd);
    return errors ? 1 : 0;
}
