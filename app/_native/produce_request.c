/* A produce read whole: the one request form the produce lane serves (produce_request.h). */
#include "produce_request.h"

#include <string.h>

#define ROUTE_START "/v1/topics/"
#define ROUTE_END "/messages"
#define OCTET_STREAM "application/octet-stream"
#define JSON "application/json"

/* The header names a lane request may carry, lower-case; any other header may change its answer. Authorization is
 * the lane's to judge (an ACL) or to ignore (none), as the general path does. */
static const char *const lane_names[] = {"host",   "content-length",  "content-type", "connection",
                                         "user-agent", "accept", "accept-encoding", "authorization"};
#define CONTENT_TYPE 2
#define AUTHORIZATION 7

static int is_topic_char(uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Whether every header is one a lane request may carry, its one Content-Type is exactly the raw or the JSON media
 * type (out->is_json says which) and it has at most one Authorization (out->has_auth, its value's place). */
static int lane_headers(const uint8_t *p, const struct http_request *r, struct produce_request *out) {
    int content_type = 0;
    out->has_auth = 0;
    out->auth_at = out->auth_len = 0;
    for (size_t i = 0; i < r->fields; i++) {
        const struct http_field *f = &r->field[i];
        const uint8_t *name = p + f->name_at;
        size_t k = 0, names = sizeof(lane_names) / sizeof(lane_names[0]);
        while (k < names && !http_lower_equals(name, f->name_len, lane_names[k])) k++;
        if (k == names) return 0;
        if (k == AUTHORIZATION) {
            if (out->has_auth) return 0; /* two: the general path answers what it makes of them */
            out->has_auth = 1;
            out->auth_at = f->value_at;
            out->auth_len = f->value_len;
        } else if (k == CONTENT_TYPE) {
            const uint8_t *value = p + f->value_at;
            if (content_type) return 0;
            if (http_lower_equals(value, f->value_len, OCTET_STREAM)) out->is_json = 0;
            else if (http_lower_equals(value, f->value_len, JSON)) out->is_json = 1;
            else return 0;
            content_type = 1;
        }
    }
    return content_type;
}

int produce_request(const uint8_t *p, size_t n, size_t max_head, struct produce_request *out) {
    struct http_request *r = &out->request;
    if (!http_request_whole(p, n, max_head, r) || !r->is_post || r->http_10 || r->body_len == 0) return 0;
    size_t start = sizeof(ROUTE_START) - 1, end = sizeof(ROUTE_END) - 1;
    const uint8_t *target = p + r->target_at;
    const uint8_t *mark = memchr(target, '?', r->target_len);
    size_t len = mark == NULL ? r->target_len : (size_t)(mark - target); /* the path */
    if (len <= start + end || memcmp(target, ROUTE_START, start) != 0 || memcmp(target + len - end, ROUTE_END, end) != 0) return 0;
    out->topic_at = r->target_at + start;
    out->topic_len = len - start - end;
    out->query_at = mark == NULL ? r->target_at + r->target_len : r->target_at + len + 1;
    out->query_len = mark == NULL ? 0 : r->target_len - len - 1;
    if (out->topic_len > PRODUCE_MAX_TOPIC_BYTES) return 0;
    for (size_t i = 0; i < out->topic_len; i++) {
        if (!is_topic_char(p[out->topic_at + i])) return 0; /* '/' and '%' among them: another route, an escape */
    }
    return lane_headers(p, r, out);
}
