/* A produce read whole in one piece (docs/native.md): `POST /v1/topics/{topic}/messages` with or without a query,
 * HTTP/1.1, a body of application/octet-stream or application/json, and no header but those that cannot change its
 * answer and one Authorization (which the produce lane judges against an ACL). */
#ifndef TIDEMQ_PRODUCE_REQUEST_H
#define TIDEMQ_PRODUCE_REQUEST_H

#include "http_request.h"

/* The longest topic segment taken here (RocketMQ's topic length limit); a longer one goes to the general path. */
#define PRODUCE_MAX_TOPIC_BYTES 127

struct produce_request {
    struct http_request request;
    size_t topic_at, topic_len; /* the topic segment, in the request's bytes: [A-Za-z0-9_-] only */
    size_t query_at, query_len; /* what follows the path's `?` (http_request_whole's target characters); 0 bytes: none */
    int is_json;                /* the body is application/json, else application/octet-stream */
    int has_auth;               /* one Authorization header, its value at [auth_at, auth_at + auth_len) */
    size_t auth_at, auth_len;
};

/* 1 when bytes [p, p+n) are exactly one such request (http_request_whole's plain forms, its head at most max_head
 * bytes) with a non-empty body; 0 otherwise (the general path answers it). */
int produce_request(const uint8_t *p, size_t n, size_t max_head, struct produce_request *out);

#endif
