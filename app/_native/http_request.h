/* A whole HTTP/1.x request read in one piece: its line, headers and body located (docs/native.md). */
#ifndef TIDEMQ_HTTP_REQUEST_H
#define TIDEMQ_HTTP_REQUEST_H

#include <stddef.h>
#include <stdint.h>

/* Header fields a request taken here may have; one with more goes to the general parser. */
#define HTTP_MAX_FIELDS 64
/* Digits a Content-Length taken here may have (below 2^53: exact as a Python float too). */
#define HTTP_MAX_LENGTH_DIGITS 15

struct http_field {
    size_t name_at, name_len;   /* in the request's bytes; the name as sent (not lowercased) */
    size_t value_at, value_len; /* leading blanks skipped; trailing ones are not taken */
};

struct http_request {
    int is_post;    /* POST, else GET */
    int http_10;    /* HTTP/1.0, else HTTP/1.1 */
    int keep_alive; /* HTTP/1.1 without `Connection: close` */
    size_t target_at, target_len;
    size_t head_len; /* the line and headers with the blank line ending them */
    size_t body_len; /* Content-Length (0 without one) */
    size_t fields;
    struct http_field field[HTTP_MAX_FIELDS];
};

/* 1 when bytes [p, p+n) are exactly one GET or POST request in origin form, HTTP/1.0 or 1.1, with
 * its head at most max_head bytes and a body of exactly its Content-Length, whose line and headers
 * use only the plain forms (out filled); 0 otherwise (the general parser answers it). */
int http_request_whole(const uint8_t *p, size_t n, size_t max_head, struct http_request *out);

/* 1 when bytes [p, p+n) equal `lower` (lower-case ASCII, NUL-terminated) in any case. */
int http_lower_equals(const uint8_t *p, size_t n, const char *lower);

#endif
