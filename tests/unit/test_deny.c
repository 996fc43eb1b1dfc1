/* Unit tests for gate/deny.c: every deny reason gets its status, its
 * Sluice-Reason header, Connection: close, a Content-Length that matches
 * the one-line body, and a body naming host:port and the agent. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "evbuffer_text.h"
#include "gate/deny.h"

static char *render(const struct deny_info *d, int *status)
{
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    *status = deny_write(d, b);
    char *s = evbuffer_text(b);
    evbuffer_free(b);
    return s;
}

static void test_every_reason(void **state)
{
    (void)state;
    for (int r = REASON_NOT_IN_POLICY; r < REASON_COUNT; r++) {
        struct deny_info d = {.reason = (enum deny_reason)r,
                              .host = "api.example.test",
                              .port = 8443,
                              .agent = "ci-bot",
                              .method = "POST",
                              .ip = "10.0.0.1",
                              .detail = "head too large",
                              .retry_after = 7};
        int status;
        char *s = render(&d, &status);
        char want[128];
        assert_int_equal(status, reason_status(d.reason));
        snprintf(want, sizeof(want), "HTTP/1.1 %d ", status);
        assert_memory_equal(s, want, strlen(want));
        snprintf(want, sizeof(want), "\r\nSluice-Reason: %s\r\n", reason_name(d.reason));
        assert_non_null(strstr(s, want));
        assert_non_null(strstr(s, "\r\nConnection: close\r\n"));
        const char *body = strstr(s, "\r\n\r\n");
        assert_non_null(body);
        body += 4;
        /* one line, ending in a newline, and the length announced */
        assert_non_null(strchr(body, '\n'));
        assert_int_equal(strchr(body, '\n') - body + 1, (long)strlen(body));
        snprintf(want, sizeof(want), "Content-Length: %zu\r\n", strlen(body));
        assert_non_null(strstr(s, want));
        assert_non_null(strstr(body, "api.example.test:8443"));
        assert_memory_equal(body, "sluice: ", 8);
        if (d.reason != REASON_AUTH_REQUIRED && d.reason != REASON_BAD_REQUEST)
            assert_non_null(strstr(body, "ci-bot"));
        assert_int_equal(strstr(s, "Retry-After: 7\r\n") != NULL,
                         d.reason == REASON_RATE_LIMITED || d.reason == REASON_QUARANTINED ||
                             d.reason == REASON_GATEWAY_OVERLOADED);
        assert_int_equal(strstr(s, "Proxy-Authenticate: Basic realm=\"sluice\"\r\n") != NULL,
                         d.reason == REASON_AUTH_REQUIRED);
        free(s);
    }
}

static void test_ipv6_and_unknowns(void **state)
{
    (void)state;
    struct deny_info d = {.reason = REASON_IP_LITERAL, .host = "::1", .port = 80};
    char msg[512];
    deny_message(&d, msg, sizeof(msg));
    assert_non_null(strstr(msg, "[::1]:80"));
    assert_non_null(strstr(msg, "agent unknown"));

    struct deny_info b = {.reason = REASON_BAD_REQUEST};
    deny_message(&b, msg, sizeof(msg));
    assert_non_null(strstr(msg, "malformed"));
    assert_null(strchr(msg, '\n'));

    /* a detail with its own advice (after "; ") gets no other */
    b.detail = "method override (X-HTTP-Method header) refused: the origin could run another "
               "method than the one decided; send that method itself";
    b.host = "api.example.test";
    b.port = 80;
    deny_message(&b, msg, sizeof(msg));
    assert_string_equal(msg, "sluice: bad request for api.example.test:80: method override "
                             "(X-HTTP-Method header) refused: the origin could run another "
                             "method than the one decided; send that method itself");
    /* one without gets the advice on the request's form */
    b.detail = "port 0";
    deny_message(&b, msg, sizeof(msg));
    assert_string_equal(msg, "sluice: bad request for api.example.test:80: port 0; send an "
                             "absolute-form HTTP/1.1 proxy request or CONNECT host:port");

    struct deny_info a = {.reason = REASON_AGENT_NOT_ALLOWED, .host = "x.test", .port = 443};
    deny_message(&a, msg, sizeof(msg));
    assert_non_null(strstr(msg, "not a known agent"));
}

/* upstream_unreachable names a failed connect without a detail, and what
 * the connected upstream did wrong with one. */
static void test_upstream_unreachable_says_which(void **state)
{
    (void)state;
    struct deny_info d = {.reason = REASON_UPSTREAM_UNREACHABLE,
                          .host = "api.example.test",
                          .port = 80,
                          .agent = "ci-bot",
                          .ip = "127.0.0.2"};
    char msg[512];
    deny_message(&d, msg, sizeof(msg));
    assert_string_equal(msg, "sluice: cannot connect to api.example.test:80 (127.0.0.2) (agent "
                             "ci-bot); the upstream is down or unreachable");
    d.detail = "the upstream sent an invalid response";
    deny_message(&d, msg, sizeof(msg));
    assert_string_equal(msg, "sluice: no usable response from api.example.test:80 (127.0.0.2) "
                             "(agent ci-bot): the upstream sent an invalid response");
}

/* A refusal of HEAD is its head alone, with the Content-Length of the
 * text that a GET would get (RFC 9110 9.3.2): the same head, no content. */
static void test_head_only(void **state)
{
    (void)state;
    struct deny_info d = {.reason = REASON_NOT_IN_POLICY,
                          .host = "a.test",
                          .port = 80,
                          .agent = "x",
                          .method = "HEAD",
                          .keep_alive = true};
    int st_full, st_head;
    char *full = render(&d, &st_full);
    d.head_only = true;
    char *head = render(&d, &st_head);
    assert_int_equal(st_full, 403);
    assert_int_equal(st_head, 403);
    const char *end = strstr(full, "\r\n\r\n");
    assert_non_null(end);
    assert_int_equal(strlen(head), (size_t)(end + 4 - full));
    assert_memory_equal(head, full, strlen(head));
    free(full);
    free(head);
}

/* RFC 9110 6.6.1: the gateway dates its refusals. The Date comes right
 * after the status line, as in every answer the gateway writes itself
 * (README, SPEC.md "Deny reasons"), then the fields in their documented
 * order; without a date (a clock past year 9999) the field is left out,
 * never sent empty. */
static void test_date_and_field_order(void **state)
{
    (void)state;
    static const char date[] = "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n";
    struct deny_info d = {.reason = REASON_RATE_LIMITED,
                          .host = "a.test",
                          .port = 80,
                          .agent = "x",
                          .retry_after = 3,
                          .keep_alive = true,
                          .date_field = date};
    int st;
    char *s = render(&d, &st);
    const char *body = strstr(s, "\r\n\r\n");
    assert_non_null(body);
    char want[512];
    snprintf(want, sizeof(want),
             "HTTP/1.1 429 Too Many Requests\r\n%sSluice-Reason: rate_limited\r\n"
             "Content-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
             "Connection: keep-alive\r\nRetry-After: 3\r\n\r\n",
             date, strlen(body + 4));
    assert_memory_equal(s, want, strlen(want));
    free(s);

    d.reason = REASON_AUTH_REQUIRED;
    d.keep_alive = false;
    d.head_only = true;
    s = render(&d, &st);
    snprintf(want, sizeof(want), "HTTP/1.1 407 Proxy Authentication Required\r\n%s", date);
    assert_memory_equal(s, want, strlen(want));
    assert_non_null(strstr(s, "\r\nConnection: close\r\nProxy-Authenticate: Basic "
                              "realm=\"sluice\"\r\n\r\n"));
    free(s);

    static const char undated[] = "HTTP/1.1 407 Proxy Authentication Required\r\nSluice-Reason: ";
    for (int i = 0; i < 2; i++) {
        d.date_field = i == 0 ? "" : NULL;
        s = render(&d, &st);
        assert_null(strstr(s, "Date"));
        assert_memory_equal(s, undated, sizeof(undated) - 1);
        free(s);
    }
}

static void test_small_buffer_truncates(void **state)
{
    (void)state;
    struct deny_info d = {
        .reason = REASON_NOT_IN_POLICY, .host = "a.test", .port = 1, .agent = "x"};
    char msg[10];
    deny_message(&d, msg, sizeof(msg));
    assert_int_equal(strlen(msg), 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_reason),
        cmocka_unit_test(test_ipv6_and_unknowns),
        cmocka_unit_test(test_upstream_unreachable_says_which),
        cmocka_unit_test(test_head_only),
        cmocka_unit_test(test_date_and_field_order),
        cmocka_unit_test(test_small_buffer_truncates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
