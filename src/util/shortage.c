/* shortage: errors that say descriptors or memory ran out (shortage.h). */
#include "util/shortage.h"

#include <errno.h>

bool errno_is_shortage(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}
