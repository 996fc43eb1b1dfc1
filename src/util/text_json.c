/* text_json: see text_json.h. */
#include "util/text_json.h"

#include <stdlib.h>

#include "util/utf8.h"

json_t *text_json(const char *s)
{
    json_t *j = json_string(s);
    if (j != NULL)
        return j;
    char *out = utf8_lossy(s);
    j = out != NULL ? json_string(out) : NULL;
    free(out);
    return j != NULL ? j : json_string("?");
}
