/* chat_template_internal.h: what chat_template.c (the pieces and the
 * blocks) and chat_template_expr.c (expressions, for and set) share. */
#ifndef FUSION_TOOLS_CHAT_TEMPLATE_INTERNAL_H
#define FUSION_TOOLS_CHAT_TEMPLATE_INTERNAL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define CT_MAX_DEPTH 64 /* blocks within blocks */
#define CT_NAME_MAX  64

typedef enum { CT_TEXT, CT_OUTPUT, CT_TAG } ct_piece_kind;

typedef struct {
    ct_piece_kind kind;
    const char *s; /* into the template: the text, or what is between the delimiters */
    size_t len;
    int line;
    char word[16]; /* a tag's first word: if, for, set, ... */
    int next;      /* if, elif, else: the next branch or endif; for: its endfor */
} ct_piece;

typedef struct {
    ct_piece *pieces;
    size_t n, cap;
} ct_template;

typedef struct {
    char *v;
    size_t n, cap;
    int failed;
} ct_buf;

typedef struct {
    char name[CT_NAME_MAX];
    const cJSON *v;
} ct_var;

enum { CT_NONE, CT_BREAK, CT_CONTINUE };

typedef struct {
    const ct_template *t;
    const cJSON *context; /* the caller's variables, below every set */
    ct_buf out;
    ct_var *vars; /* set and loop variables, innermost last */
    size_t n_vars, cap_vars;
    cJSON **pool; /* every value made: freed when the render ends */
    size_t n_pool, cap_pool;
    size_t scope; /* vars[scope ..]: the innermost for loop's (set writes there) */
    int loops;    /* for loops being run */
    int jump;     /* CT_BREAK or CT_CONTINUE: leave the loop's body */
    int line;     /* of the piece being run, for errors */
    int failed;   /* why says */
    int raised;   /* the template's raise_exception: its message alone */
    char why[480];
} ct_render;

/* Undefined (a name or attribute that is not there): false, prints as "". */
extern cJSON ct_undefined_node;
#define CT_UNDEFINED (&ct_undefined_node)

/* v kept until the render ends (NULL, and the render failed, when v is NULL). */
cJSON *ct_keep(ct_render *r, cJSON *v);
/* Fail the render with "line N: ..." (the first failure stays); NULL. */
cJSON *ct_fail(ct_render *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ct_truthy(const cJSON *v);
void ct_buf_add(ct_buf *b, const char *s, size_t n);
/* str(v), as Python prints it. */
void ct_add_str(ct_buf *b, const cJSON *v);
/* Where a tag's text goes on after its first word. */
size_t ct_tag_rest(const ct_piece *pc);

/* Values made (kept until the render ends); NULL failed. */
const cJSON *ct_string_n(ct_render *r, const char *s, size_t n);
const cJSON *ct_string(ct_render *r, const char *s);
const cJSON *ct_number(ct_render *r, double x);
const cJSON *ct_boolean(ct_render *r, int b);
/* A list whose items are references to items[] (they stay where they are). */
const cJSON *ct_list_of(ct_render *r, const cJSON *const *items, int n);
/* str(v) as a string value. */
const cJSON *ct_str_of(ct_render *r, const cJSON *v);
/* The items of a list, the keys of a dict, the characters of a string, as a list. */
const cJSON *ct_items_of(ct_render *r, const cJSON *v);
int ct_equal(const cJSON *a, const cJSON *b);
/* JSON as Python's json.dumps writes it (", " and ": "): Hugging Face's tojson. */
void ct_add_json(ct_buf *b, const cJSON *v);

/* A call's arguments: positional (key "") and by keyword. */
#define CT_MAX_ARGS 8
typedef struct {
    const cJSON *v[CT_MAX_ARGS];
    char key[CT_MAX_ARGS][CT_NAME_MAX];
    int n;
} ct_args;
/* The i-th positional argument, or the one named key (NULL: none). */
const cJSON *ct_arg(const ct_args *a, int i, const char *key);
/* name(args), v.name(args), v | name(args), v is name(args): NULL (or -1) failed. */
const cJSON *ct_call_function(ct_render *r, const char *name, const ct_args *a);
const cJSON *ct_call_method(ct_render *r, const cJSON *v, const char *name, const ct_args *a);
const cJSON *ct_call_filter(ct_render *r, const cJSON *v, const char *name, const ct_args *a);
int ct_call_test(ct_render *r, const cJSON *v, const char *name, const ct_args *a, int *out);

/* The expression s[0, len) (all of it); NULL failed. */
const cJSON *ct_eval(ct_render *r, const char *s, size_t len);
/* {% for %} at piece i: its body run (by `run`) for each item.  0, or -1 failed. */
int ct_run_for(ct_render *r, int i, int (*run)(ct_render *, int, int));
/* {% set name = e %} or {% set ns.attr = e %}.  0, or -1 failed. */
int ct_run_set(ct_render *r, const ct_piece *pc);

#endif
