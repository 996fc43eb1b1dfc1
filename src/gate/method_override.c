/* method_override: see method_override.h. */
#include "gate/method_override.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "util/query.h"

#define REFUSAL(what)                                                                              \
    "method override (" what ") refused: the origin could run another method than the "            \
    "one decided; send that method itself"

#define PARAM_NAME     "_method"
#define PARAM_NAME_LEN (sizeof(PARAM_NAME) - 1)

/* The overrides the frameworks above read, as the gateway names them, the
 * names' lengths, and its refusal of each: the headers, then the query
 * parameter. Every header's name starts with an X: override_in() passes
 * over the other fields at their first byte. */
struct override {
    const char *name;
    size_t len;
    const char *refusal;
};
#define OVERRIDE_HEADER(name)                                                                      \
    {                                                                                              \
        name, sizeof(name) - 1, REFUSAL(name " header")                                            \
    }
static const struct override override_headers[] = {
    OVERRIDE_HEADER("X-HTTP-Method-Override"),
    OVERRIDE_HEADER("X-HTTP-Method"),
    OVERRIDE_HEADER("X-Method-Override"),
};
static const struct override override_param = {PARAM_NAME, PARAM_NAME_LEN,
                                               REFUSAL("_method query parameter")};

/* True when the field name <n> (<len> bytes) is <name> (<name_len>
 * bytes), ignoring case and taking '_' for '-': CGI, FastCGI and WSGI
 * servers that pass a name with underscores on name both spellings
 * HTTP_X_HTTP_METHOD_OVERRIDE. */
static bool is_header_name(const char *n, size_t len, const char *name, size_t name_len)
{
    if (len != name_len)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = n[i] == '_' ? '-' : n[i];
        if (tolower((unsigned char)c) != tolower((unsigned char)name[i]))
            return false;
    }
    return true;
}

/* True when <v> (<len> bytes) is not <method>, ignoring case. */
static bool names_other(const char *v, size_t len, const char *method)
{
    return len != strlen(method) || strncasecmp(v, method, len) != 0;
}

/* True when the parameter name <n> (<len> bytes, percent-encoded as sent)
 * decodes to "_method": frameworks decode names before they look them up,
 * so "%5Fmethod" is one too. And so is every name that PHP makes
 * "_method" in $_GET, where Symfony and Laravel look for it: PHP drops a
 * name's leading spaces, makes a '.' or a space '_' (a variable's name
 * has neither), and ends the name at a NUL, so ".method", "+_method" and
 * "_method%00x" are read as "_method" there. */
static bool is_param_name(const char *n, size_t len)
{
    size_t i = 0;
    int c = ' ';
    while (c == ' ' && i < len)
        c = query_name_byte(n, len, &i);
    if (c != '_' && c != '.')
        return false; /* another first byte, or nothing but spaces */
    for (size_t o = 1; o < PARAM_NAME_LEN; o++)
        if (i == len || query_name_byte(n, len, &i) != PARAM_NAME[o])
            return false;
    return i == len || query_name_byte(n, len, &i) == '\0';
}

/* True when the query of <path> (<len> bytes) holds a _method parameter
 * whose value is not <method>. Parameters are split on '&' and ';' (Rack
 * splits on both); the query ends at a '#'. */
static bool query_overrides(const char *path, size_t len, const char *method)
{
    const char *q = path != NULL ? memchr(path, '?', len) : NULL;
    if (q == NULL)
        return false;
    const char *end = path + len, *hash = memchr(q, '#', (size_t)(end - q));
    if (hash != NULL)
        end = hash;
    for (const char *p = q + 1; p < end;) {
        const char *e = p;
        while (e < end && !query_is_separator(*e))
            e++;
        const char *eq = memchr(p, '=', (size_t)(e - p));
        const char *name_end = eq != NULL ? eq : e;
        if (is_param_name(p, (size_t)(name_end - p))) {
            const char *v = eq != NULL ? eq + 1 : e;
            if (names_other(v, (size_t)(e - v), method))
                return true;
        }
        p = e + 1;
    }
    return false;
}

/* The first override in <req> whose value is not its method, or NULL. */
static const struct override *override_in(const struct http_request *req)
{
    for (size_t i = 0; i < req->nheaders; i++) {
        const struct http_header *h = &req->headers[i];
        if (h->name_len == 0 || (h->name[0] != 'X' && h->name[0] != 'x'))
            continue; /* no override header: most fields of a request */
        for (size_t k = 0; k < sizeof(override_headers) / sizeof(override_headers[0]); k++) {
            const struct override *o = &override_headers[k];
            if (is_header_name(h->name, h->name_len, o->name, o->len) &&
                names_other(h->value, h->value_len, req->method))
                return o;
        }
    }
    if (query_overrides(req->path, req->path_len, req->method))
        return &override_param;
    return NULL;
}

const char *method_override_find(const struct http_request *req)
{
    const struct override *o = override_in(req);
    return o != NULL ? o->name : NULL;
}

const char *method_override_refusal(const struct http_request *req)
{
    const struct override *o = override_in(req);
    return o != NULL ? o->refusal : NULL;
}
