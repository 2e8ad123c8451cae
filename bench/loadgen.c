/* One closed-loop load generator for HTTP/1.1 and Redis (RESP) servers alike.

   The benchmarks compare tidemq (HTTP) with Redis (RESP); driving both with this one program
   gives both sides the same client: one thread, one epoll loop, `connections` keep-alive
   connections, each sending one pre-built request (read from a file, sent byte for byte) and
   waiting for its whole reply before sending it again.

   usage: loadgen PORT CONNECTIONS SECONDS REQUEST_FILE http|resp REPLIES [WARMUP_SECONDS]

   A request is the file's bytes; it is answered by REPLIES replies (1 for an HTTP request; N
   for N pipelined Redis commands). An HTTP reply is a status line, headers and a
   Content-Length body (chunked replies are not expected and end the run with an error); a
   status outside 2xx counts as an error. A RESP reply is one +, -, : or $ reply (- counts as
   an error). Requests are counted when their last reply arrived within the measured
   SECONDS, after WARMUP_SECONDS (default 0) of uncounted load.
   Prints one line: requests=N errors=N seconds=S cpu_s=S (the generator's own CPU). */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#define READ_BUFFER_BYTES 65536
#define MAX_CONNECTIONS 4096
#define MAX_EVENTS 256

enum protocol { HTTP, RESP };

struct connection {
    int fd;
    size_t sent;          /* bytes of the request written so far */
    long replies_left;    /* replies still expected for the request in flight */
    char head[READ_BUFFER_BYTES]; /* the current reply's unparsed bytes (headers or a RESP line) */
    size_t head_len;
    long long body_left;  /* bytes of an HTTP body or RESP bulk still to skip */
    int in_body;
    int reply_failed;     /* the reply under way is an error reply */
};

static const char *request;
static size_t request_len;
static enum protocol proto;
static long replies_per_request;
static long long counted, errors;
static int counting;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

static int open_connection(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
    if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0) die("fcntl");
    return fd;
}

/* Write what is left of the request; 0 when all of it is out, 1 when the socket is full. */
static int send_request(struct connection *c) {
    while (c->sent < request_len) {
        ssize_t n = write(c->fd, request + c->sent, request_len - c->sent);
        if (n < 0) {
            if (errno == EAGAIN) return 1;
            die("write");
        }
        c->sent += (size_t)n;
    }
    return 0;
}

/* One reply ended: count it, and the request when it was the last of its replies. */
static void reply_done(struct connection *c) {
    if (c->reply_failed && counting) errors++;
    c->reply_failed = 0;
    c->in_body = 0;
    c->body_left = 0;
    if (--c->replies_left == 0) {
        if (counting) counted++;
        c->replies_left = replies_per_request;
        c->sent = 0;
    }
}

/* The Content-Length of complete HTTP headers `h` (NUL-terminated), -1 when absent. */
static long long content_length(const char *h) {
    const char *p = h;
    while ((p = strchr(p, '\n')) != NULL) {
        p++;
        if (strncasecmp(p, "content-length:", 15) == 0) return atoll(p + 15);
        if (strncasecmp(p, "transfer-encoding:", 18) == 0) {
            fprintf(stderr, "chunked replies are not supported\n");
            exit(2);
        }
    }
    return -1;
}

/* Parse `len` bytes at `data`; returns the bytes consumed (all of them unless a request ended,
   in which case the caller sends the next request before parsing on). */
static size_t parse_http(struct connection *c, const char *data, size_t len) {
    size_t used = 0;
    while (used < len) {
        if (c->in_body) {
            size_t take = (size_t)c->body_left < len - used ? (size_t)c->body_left : len - used;
            c->body_left -= (long long)take;
            used += take;
            if (c->body_left == 0) {
                reply_done(c);
                if (c->sent == 0) return used;
            }
            continue;
        }
        if (c->head_len >= sizeof c->head - 1) {
            fprintf(stderr, "reply headers over %d bytes\n", READ_BUFFER_BYTES);
            exit(2);
        }
        c->head[c->head_len++] = data[used++];
        if (c->head_len >= 4 && memcmp(c->head + c->head_len - 4, "\r\n\r\n", 4) == 0) {
            c->head[c->head_len] = 0;
            int status = c->head_len > 12 ? atoi(c->head + 9) : 0;
            c->reply_failed = status < 200 || status > 299;
            long long length = content_length(c->head);
            c->head_len = 0;
            if (length < 0) {
                fprintf(stderr, "a reply without Content-Length\n");
                exit(2);
            }
            c->body_left = length;
            c->in_body = 1;
            if (length == 0) {
                reply_done(c);
                if (c->sent == 0) return used;
            }
        }
    }
    return used;
}

static size_t parse_resp(struct connection *c, const char *data, size_t len) {
    size_t used = 0;
    while (used < len) {
        if (c->in_body) { /* a bulk string's bytes and its CRLF */
            size_t take = (size_t)c->body_left < len - used ? (size_t)c->body_left : len - used;
            c->body_left -= (long long)take;
            used += take;
            if (c->body_left == 0) {
                reply_done(c);
                if (c->sent == 0) return used;
            }
            continue;
        }
        if (c->head_len >= sizeof c->head - 1) {
            fprintf(stderr, "a RESP line over %d bytes\n", READ_BUFFER_BYTES);
            exit(2);
        }
        c->head[c->head_len++] = data[used++];
        if (c->head_len >= 2 && c->head[c->head_len - 2] == '\r' && c->head[c->head_len - 1] == '\n') {
            c->head[c->head_len] = 0;
            char kind = c->head[0];
            c->head_len = 0;
            if (kind == '$') {
                long long n = atoll(c->head + 1);
                if (n >= 0) {
                    c->body_left = n + 2;
                    c->in_body = 1;
                    continue;
                }
            } else if (kind == '-') {
                c->reply_failed = 1;
            } else if (kind != '+' && kind != ':') {
                fprintf(stderr, "unexpected RESP reply %c\n", kind);
                exit(2);
            }
            reply_done(c);
            if (c->sent == 0) return used;
        }
    }
    return used;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: loadgen PORT CONNECTIONS SECONDS REQUEST_FILE http|resp REPLIES [WARMUP_SECONDS]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    int connections = atoi(argv[2]);
    double seconds = atof(argv[3]);
    proto = strcmp(argv[5], "resp") == 0 ? RESP : HTTP;
    replies_per_request = atol(argv[6]);
    double warmup = argc > 7 ? atof(argv[7]) : 0.0;
    if (connections < 1 || connections > MAX_CONNECTIONS || replies_per_request < 1) {
        fprintf(stderr, "1..%d connections and at least one reply\n", MAX_CONNECTIONS);
        return 2;
    }
    int file = open(argv[4], O_RDONLY);
    struct stat st;
    if (file < 0 || fstat(file, &st) < 0) die(argv[4]);
    char *bytes = malloc((size_t)st.st_size + 1);
    if (bytes == NULL || read(file, bytes, (size_t)st.st_size) != st.st_size) die("read request");
    close(file);
    request = bytes;
    request_len = (size_t)st.st_size;

    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    struct connection *conns = calloc((size_t)connections, sizeof *conns);
    if (conns == NULL) die("calloc");
    for (int i = 0; i < connections; i++) {
        conns[i].fd = open_connection(port);
        conns[i].replies_left = replies_per_request;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = &conns[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev) < 0) die("epoll_ctl");
        send_request(&conns[i]);
    }

    double start = now_s(), measure_from = start + warmup, end = measure_from + seconds;
    struct rusage usage_start;
    int measuring = 0;
    char buffer[READ_BUFFER_BYTES];
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        double t = now_s();
        if (!measuring && t >= measure_from) {
            measuring = counting = 1;
            getrusage(RUSAGE_SELF, &usage_start);
            measure_from = t;
        }
        if (t >= end) break;
        int n = epoll_wait(ep, events, MAX_EVENTS, 50);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct connection *c = events[i].data.ptr;
            if (c->sent < request_len && send_request(c)) continue;
            for (;;) {
                ssize_t got = read(c->fd, buffer, sizeof buffer);
                if (got == 0) {
                    fprintf(stderr, "the server closed a connection\n");
                    return 3;
                }
                if (got < 0) {
                    if (errno == EAGAIN) break;
                    die("read");
                }
                size_t used = 0;
                while (used < (size_t)got) {
                    used += proto == HTTP ? parse_http(c, buffer + used, (size_t)got - used)
                                          : parse_resp(c, buffer + used, (size_t)got - used);
                    if (c->sent == 0 && send_request(c)) break;
                }
            }
        }
    }
    struct rusage usage_end;
    getrusage(RUSAGE_SELF, &usage_end);
    double cpu = (usage_end.ru_utime.tv_sec - usage_start.ru_utime.tv_sec) + (usage_end.ru_utime.tv_usec - usage_start.ru_utime.tv_usec) / 1e6 +
                 (usage_end.ru_stime.tv_sec - usage_start.ru_stime.tv_sec) + (usage_end.ru_stime.tv_usec - usage_start.ru_stime.tv_usec) / 1e6;
    printf("requests=%lld errors=%lld seconds=%.6f cpu_s=%.6f\n", counted, errors, now_s() - measure_from, cpu);
    return 0;
}
