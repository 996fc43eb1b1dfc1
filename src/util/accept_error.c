/* accept_error: accept() errors that concern one connection (accept_error.h). */
#include "util/accept_error.h"

#include <errno.h>

bool accept_error_is_per_conn(int err)
{
    switch (err) {
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case ECONNABORTED: /* libevent skips it itself */
        return true;
    default:
        return false;
    }
}
