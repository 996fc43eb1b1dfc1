/* kept_decision: what a plain exchange keeps of its decision once it lets
 * go of its policy (kept_decision.h). */
#include "gate/kept_decision.h"

#include <stdlib.h>
#include <string.h>

/* The numbers of rule <from> into <to>, nothing it owns. */
static void rule_numbers(struct rule *to, const struct rule *from)
{
    memset(to, 0, sizeof(*to));
    to->index = from->index;
    to->line = from->line;
    to->kind = from->kind;
    to->cidr = from->cidr;
    to->tier = from->tier;
    to->has_expires = from->has_expires;
    to->expires = from->expires;
}

/* A copy of <s> into <*to>; false when <s> is there and no memory is. */
static bool copy_text(char **to, const char *s)
{
    *to = s != NULL ? strdup(s) : NULL;
    return s == NULL || *to != NULL;
}

struct kept_decision *kept_decision_new(const struct decision *dec, const char *agent_id)
{
    struct kept_decision *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return NULL;
    if (!copy_text(&k->owner, dec->owner) || !copy_text(&k->agent_id, agent_id)) {
        kept_decision_free(k);
        return NULL;
    }
    if (dec->rule != NULL)
        rule_numbers(&k->rule, dec->rule);
    if (dec->grant != NULL)
        rule_numbers(&k->grant, dec->grant);
    return k;
}

void kept_decision_apply(const struct kept_decision *k, struct decision *dec)
{
    if (dec->rule != NULL)
        dec->rule = &k->rule;
    if (dec->grant != NULL)
        dec->grant = &k->grant;
    dec->owner = k->owner;
    dec->nlimits = 0; /* its flow is closed: nothing meters it any more */
}

void kept_decision_free(struct kept_decision *k)
{
    if (k == NULL)
        return;
    free(k->owner);
    free(k->agent_id);
    free(k);
}
