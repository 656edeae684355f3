/* hyper_check.c: a model's <hyper> that nothing reads is a typo until
 * shown otherwise.  `<hyper name="learnig_rate" value="1e-3"/>` used to
 * leave lr at its default without a word; now it is refused, naming the
 * line, the nearest known name and every name that is read.
 *
 * A hyper-parameter is read when its name appears as a word in any
 * attribute of the model (an op's shape, a repeat's count, another
 * hyper-parameter's value: the expressions the frontend evaluates), or
 * when the compiler reads it by name (the optimizer's settings, the batch,
 * the context, the vocabulary: hyper_check_compiler_names). */
#include "hyper_check.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "../ir/diag.h"
#include "../ir/suggest.h"
#include "xml_util.h"

/* What passes and tools read by name (passes/optimizer.c, passes/decode.c,
 * tools/fusionc.c): never unused. */
static const char *const compiler_names[] = { "lr",        "beta1",  "beta2", "adam_eps", "weight_decay",
                                              "grad_clip", "warmup", "steps", "min_lr",   "sgd",
                                              "batch",     "ctx",    "vocab" };
#define N_COMPILER_NAMES ((int)(sizeof compiler_names / sizeof compiler_names[0]))

/* Other tools' names for them, so that a misspelt learning_rate is led to
 * lr: { theirs, ours }. */
static const char *const other_names[][2] = {
    { "learning_rate", "lr" },
    { "max_lr", "lr" },
    { "min_learning_rate", "min_lr" },
    { "lr_min", "min_lr" },
    { "warmup_steps", "warmup" },
    { "max_steps", "steps" },
    { "total_steps", "steps" },
    { "wd", "weight_decay" },
    { "max_grad_norm", "grad_clip" },
    { "clip_grad_norm", "grad_clip" },
    { "adam_beta1", "beta1" },
    { "adam_beta2", "beta2" },
    { "adam_epsilon", "adam_eps" },
    { "batch_size", "batch" },
    { "seq_len", "seq" },
};

/* Whether word appears in text as a whole identifier. */
static int has_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *at = strstr(text, word); at; at = strstr(at + 1, word)) {
        int before = at > text && (isalnum((unsigned char)at[-1]) || at[-1] == '_');
        int after = isalnum((unsigned char)at[n]) || at[n] == '_';
        if (!before && !after)
            return 1;
    }
    return 0;
}

/* Whether any attribute below node (its own included) but the `name` of a
 * <hyper> mentions word. */
static int mentioned(xmlNodePtr node, const char *word)
{
    for (; node; node = node->next) {
        if (node->type != XML_ELEMENT_NODE)
            continue;
        int is_hyper = strcmp((const char *)node->name, "hyper") == 0;
        for (xmlAttrPtr a = node->properties; a; a = a->next) {
            if (is_hyper && strcmp((const char *)a->name, "name") == 0)
                continue;
            xmlChar *value = xmlNodeListGetString(node->doc, a->children, 1);
            int found = value && has_word((const char *)value, word);
            xmlFree(value);
            if (found)
                return 1;
        }
        if (mentioned(node->children, word))
            return 1;
    }
    return 0;
}

int hyper_check_read(xmlNodePtr root, const char *path, struct diag *err)
{
    const char *read[256];
    char names[256][64];
    int n_read = 0;
    for (int k = 0; k < N_COMPILER_NAMES; k++)
        read[n_read++] = compiler_names[k];
    xmlNodePtr unread = NULL;
    char unread_name[64] = "";
    for (xmlNodePtr node = root->children; node; node = node->next) {
        const char *el = xml_element_name(node);
        char name[64];
        if (!el || strcmp(el, "hyper") != 0 || xml_attr(node, "name", name, sizeof name, path, NULL) != 1)
            continue;
        int known = 0;
        for (int k = 0; k < N_COMPILER_NAMES && !known; k++)
            known = strcmp(name, compiler_names[k]) == 0;
        if (known)
            continue;
        if (mentioned(root->children, name)) {
            if (n_read < (int)(sizeof read / sizeof read[0])) {
                snprintf(names[n_read], sizeof names[n_read], "%s", name);
                read[n_read] = names[n_read];
                n_read++;
            }
        } else if (!unread) {
            unread = node;
            snprintf(unread_name, sizeof unread_name, "%s", name);
        }
    }
    if (!unread)
        return 0;
    char suggestion[128], list[2048] = "";
    suggest_nearest(unread_name, read, n_read, suggestion, sizeof suggestion);
    const int n_other = (int)(sizeof other_names / sizeof other_names[0]);
    for (int k = 0; k < n_other && !suggestion[0]; k++) { /* another tool's name, or a typo of one */
        const char *theirs = other_names[k][0];
        char near[128];
        suggest_nearest(unread_name, &theirs, 1, near, sizeof near);
        if (near[0] || strcmp(unread_name, theirs) == 0)
            snprintf(suggestion, sizeof suggestion, "; did you mean '%s' (what fusion calls %s)?", other_names[k][1],
                     theirs);
    }
    for (int k = 0; k < n_read; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", read[k]);
    return diag_set(err, path, xml_line(unread),
                    "hyper-parameter '%s' is read by nothing: no expression of the model names it and the compiler "
                    "does not know it%s (the names read: %s)",
                    unread_name, suggestion, list);
}
