/* Unit tests for gate/method_override.c: the override headers and _method
 * query parameters a request head may carry, parsed by http1.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gate/method_override.h"

#define MAX_HEAD 32768

/* Parses the head "<method> http://a.test<target> HTTP/1.1" with the extra
 * header lines <hdrs> ("" for none) and returns method_override_find(). */
static const char *found(const char *method, const char *target, const char *hdrs)
{
    static char head[1024];
    static struct http_request req;
    const char *why = NULL;
    int n = snprintf(head, sizeof(head), "%s http://a.test%s HTTP/1.1\r\nHost: a.test\r\n%s\r\n",
                     method, target, hdrs);
    assert_true(n > 0 && (size_t)n < sizeof(head));
    int rc = http1_parse_request(head, (size_t)n, MAX_HEAD, &req, &why);
    if (rc <= 0)
        fail_msg("%s %s: parse %d (%s)", method, target, rc, why ? why : "");
    return method_override_find(&req);
}

static void test_headers(void **state)
{
    (void)state;
    assert_null(found("GET", "/", ""));
    assert_string_equal(found("GET", "/", "X-HTTP-Method-Override: DELETE\r\n"),
                        "X-HTTP-Method-Override");
    assert_string_equal(found("GET", "/", "x-http-method: put\r\n"), "X-HTTP-Method");
    assert_string_equal(found("HEAD", "/", "X-Method-Override: PATCH\r\n"), "X-Method-Override");
    /* a write that names a read would pass a write for a read downstream */
    assert_string_equal(found("POST", "/", "X-HTTP-Method-Override: GET\r\n"),
                        "X-HTTP-Method-Override");
    /* empty, or the second of two */
    assert_string_equal(found("GET", "/", "X-HTTP-Method-Override:\r\n"), "X-HTTP-Method-Override");
    assert_string_equal(found("GET", "/", "X-HTTP-Method: GET\r\nX-Method-Override: DELETE\r\n"),
                        "X-Method-Override");
    /* its own method, in any case, overrides nothing */
    assert_null(found("GET", "/", "X-HTTP-Method-Override: get\r\nX-HTTP-Method: GET\r\n"));
    assert_null(found("DELETE", "/", "X-HTTP-Method-Override: DELETE\r\n"));
    /* CGI and WSGI name both spellings HTTP_X_HTTP_METHOD_OVERRIDE */
    assert_string_equal(found("GET", "/", "X_HTTP_Method_Override: DELETE\r\n"),
                        "X-HTTP-Method-Override");
    assert_string_equal(found("GET", "/", "x-method_override: PUT\r\n"), "X-Method-Override");
    /* look-alike names are no override header */
    assert_null(found("GET", "/", "X-HTTP-Method-Overrides: DELETE\r\nX-Method: DELETE\r\n"));
}

static void test_query(void **state)
{
    (void)state;
    assert_string_equal(found("GET", "/?_method=DELETE", ""), "_method");
    assert_string_equal(found("GET", "/x?a=1&_method=PUT", ""), "_method");
    assert_string_equal(found("GET", "/x?a=1;_method=PUT", ""), "_method");
    assert_string_equal(found("GET", "/x?%5Fmethod=PUT", ""), "_method");
    assert_string_equal(found("GET", "/x?%5f%6Dethod=PUT", ""), "_method");
    assert_string_equal(found("GET", "/x?_method", ""), "_method");
    assert_string_equal(found("POST", "/x?_method=GET", ""), "_method");
    assert_null(found("GET", "/x?_method=GET", ""));
    assert_null(found("GET", "/x?method=DELETE&x_method=1&_methods=PUT&_metho=PUT", ""));
    assert_null(found("GET", "/_method=DELETE", ""));          /* a path, not a query */
    assert_null(found("GET", "/x?%5=1&%=2&%5Fmetho=PUT", "")); /* cut escapes */
    assert_null(found("GET", "/x?a=%_method=PUT", ""));
}

/* PHP's $_GET, where Symfony and Laravel look for _method: PHP drops a
 * name's leading spaces, makes a '.' or ' ' in it '_', ends it at a NUL. */
static void test_query_names_php_reads(void **state)
{
    static const char *const named[] = {
        "/x?.method=DELETE",       "/x?%2Emethod=DELETE",  "/x?+_method=DELETE",
        "/x?%20%20.method=DELETE", "/x?_method%00=DELETE", "/x?.method%00junk=DELETE",
    };
    static const char *const unnamed[] = {
        "/x?.method=POST", /* its own method */
        "/x?+method=DELETE&x.method=1&_method.=PUT&_.method=PUT",
        "/x?_method+=DELETE&_method%01=PUT&%00_method=PUT&+=1&%2=1",
    };
    (void)state;
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        assert_string_equal(found("POST", named[i], ""), "_method");
    for (size_t i = 0; i < sizeof(unnamed) / sizeof(unnamed[0]); i++)
        assert_null(found("POST", unnamed[i], ""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_query_names_php_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
