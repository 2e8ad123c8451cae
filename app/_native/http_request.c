/* A whole HTTP/1.x request in one read, located without callbacks (http_request.h).
 *
 * Strict on purpose: anything but the plain forms (another method, an absolute or unusual target,
 * folded, blank-ended or non-ASCII header values, Transfer-Encoding, Expect, Upgrade, Proxy-Connection, a Connection
 * other than one close or keep-alive, a second Content-Length, a body not exactly there) is not
 * taken, and the general parser (httptools) answers it; so a request taken here is one that
 * parser reads the same way. Every position is checked against n before it is read. */
#include "http_request.h"

#include <string.h>

static int is_tchar(uint8_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* RFC 3986 path and query characters: unreserved, sub-delims, ':', '@', '/', '?', '%'. */
static int is_target_char(uint8_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c != 0 && strchr("-._~!$&'()*+,;=:@/?%", c) != NULL;
}

int http_lower_equals(const uint8_t *p, size_t n, const char *lower) {
    size_t len = strlen(lower);
    if (n != len) return 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (c >= 'A' && c <= 'Z') c = (uint8_t)(c + 32);
        if (c != (uint8_t)lower[i]) return 0;
    }
    return 1;
}

/* The request line: the method, the target and the version; the position after its CRLF, 0 when not taken. */
static size_t request_line(const uint8_t *p, size_t n, struct http_request *out) {
    size_t at;
    if (n >= 4 && memcmp(p, "GET ", 4) == 0) {
        out->is_post = 0, at = 4;
    } else if (n >= 5 && memcmp(p, "POST ", 5) == 0) {
        out->is_post = 1, at = 5;
    } else {
        return 0;
    }
    if (at >= n || p[at] != '/') return 0;
    out->target_at = at;
    while (at < n && is_target_char(p[at])) at++;
    out->target_len = at - out->target_at;
    if (n - at < 10 || memcmp(p + at, " HTTP/1.", 8) != 0 || p[at + 9] != '\r') return 0;
    if (p[at + 8] != '0' && p[at + 8] != '1') return 0;
    out->http_10 = p[at + 8] == '0';
    if (at + 10 >= n || p[at + 10] != '\n') return 0;
    return at + 11;
}

/* A Content-Length value: its digits, -1 when it is not a plain one. */
static long long content_length(const uint8_t *p, size_t n) {
    if (n == 0 || n > HTTP_MAX_LENGTH_DIGITS) return -1;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* What a field means to the framing: 1 taken (noted in out), 0 not taken here. */
static int framing_field(const uint8_t *p, const struct http_field *f, struct http_request *out, int *close, int *has_length) {
    const uint8_t *name = p + f->name_at, *value = p + f->value_at;
    if (http_lower_equals(name, f->name_len, "content-length")) {
        long long v = content_length(value, f->value_len);
        if (v < 0 || *has_length) return 0;
        *has_length = 1;
        out->body_len = (size_t)v;
        return 1;
    }
    if (http_lower_equals(name, f->name_len, "connection")) {
        if (http_lower_equals(value, f->value_len, "close")) *close = 1;
        else if (!http_lower_equals(value, f->value_len, "keep-alive")) return 0;
        return 1;
    }
    /* llhttp reads Proxy-Connection as it reads Connection: left to it. */
    return !http_lower_equals(name, f->name_len, "transfer-encoding") && !http_lower_equals(name, f->name_len, "expect") &&
           !http_lower_equals(name, f->name_len, "upgrade") && !http_lower_equals(name, f->name_len, "proxy-connection");
}

/* One header line from `at`: the field located, the position after its CRLF; 0 when not taken. */
static size_t header_line(const uint8_t *p, size_t n, size_t at, struct http_field *f) {
    f->name_at = at;
    while (at < n && is_tchar(p[at])) at++;
    f->name_len = at - f->name_at;
    if (f->name_len == 0 || at >= n || p[at] != ':') return 0;
    at++;
    while (at < n && (p[at] == ' ' || p[at] == '\t')) at++;
    f->value_at = at;
    while (at < n && ((p[at] >= 0x20 && p[at] < 0x7f) || p[at] == '\t')) at++;
    f->value_len = at - f->value_at;
    if (f->value_len > 0 && (p[at - 1] == ' ' || p[at - 1] == '\t')) return 0;
    if (n - at < 2 || p[at] != '\r' || p[at + 1] != '\n') return 0;
    return at + 2;
}

int http_request_whole(const uint8_t *p, size_t n, size_t max_head, struct http_request *out) {
    size_t at = request_line(p, n, out);
    if (at == 0) return 0;
    int close = 0, has_length = 0;
    out->fields = 0;
    out->body_len = 0;
    while (1) {
        if (at > max_head) return 0;
        if (n - at >= 2 && p[at] == '\r' && p[at + 1] == '\n') break;
        if (out->fields == HTTP_MAX_FIELDS) return 0;
        struct http_field *f = &out->field[out->fields];
        at = header_line(p, n, at, f);
        if (at == 0 || !framing_field(p, f, out, &close, &has_length)) return 0;
        out->fields++;
    }
    out->head_len = at + 2;
    if (out->head_len > max_head || (out->is_post && !has_length)) return 0;
    if (n - out->head_len != out->body_len) return 0; /* part of the body, or a pipelined request after it */
    out->keep_alive = !out->http_10 && !close;
    return 1;
}
