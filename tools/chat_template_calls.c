/* chat_template_calls.c: the bottom of the chat-template renderer
 * (chat_template_internal.h): its values (cJSON nodes kept in the
 * render's pool), errors and output, and what templates call: functions
 * (raise_exception, range, namespace), methods of strings and dicts,
 * filters and `is` tests. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template_internal.h"

/* ---- values and errors -------------------------------------------------------- */

cJSON ct_undefined_node = { .type = cJSON_Invalid };

cJSON *ct_keep(ct_render *r, cJSON *v)
{
    if (!v || r->failed)
        return v ? (cJSON_Delete(v), NULL) : (ct_fail(r, "out of memory"), NULL);
    if (r->n_pool == r->cap_pool) {
        size_t cap = r->cap_pool * 2 + 64;
        cJSON **grown = realloc(r->pool, cap * sizeof *grown);
        if (!grown) {
            cJSON_Delete(v);
            ct_fail(r, "out of memory");
            return NULL;
        }
        r->pool = grown, r->cap_pool = cap;
    }
    r->pool[r->n_pool++] = v;
    return v;
}

cJSON *ct_fail(ct_render *r, const char *fmt, ...)
{
    if (!r->failed) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (r->raised)
            snprintf(r->why, sizeof r->why, "%s", msg);
        else
            snprintf(r->why, sizeof r->why, "line %d: %s", r->line, msg);
        r->failed = 1;
    }
    return NULL;
}

int ct_truthy(const cJSON *v)
{
    if (cJSON_IsString(v))
        return v->valuestring[0] != '\0';
    if (cJSON_IsNumber(v))
        return v->valuedouble != 0.0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
        return v->child != NULL;
    return cJSON_IsTrue(v);
}

void ct_buf_add(ct_buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *grown = realloc(b->v, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->v = grown, b->cap = cap;
    }
    memcpy(b->v + b->n, s, n);
    b->n += n;
    b->v[b->n] = '\0';
}

/* A number as Python prints it: an integer without a point, else the
 * shortest form that reads back. */
static void add_number(ct_buf *b, double x)
{
    char s[40];
    if (x == (double)(long long)x && x > -1e16 && x < 1e16)
        snprintf(s, sizeof s, "%lld", (long long)x);
    else
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(s, sizeof s, "%.*g", digits, x);
            if (strtod(s, NULL) == x)
                break;
        }
    ct_buf_add(b, s, strlen(s));
}

/* str(v) as Python gives it (repr for the items of a list or a dict). */
static void add_str(ct_buf *b, const cJSON *v, int repr)
{
    if (cJSON_IsString(v)) {
        if (repr)
            ct_buf_add(b, "'", 1);
        ct_buf_add(b, v->valuestring, strlen(v->valuestring));
        if (repr)
            ct_buf_add(b, "'", 1);
    } else if (cJSON_IsNumber(v)) {
        add_number(b, v->valuedouble);
    } else if (cJSON_IsBool(v)) {
        ct_buf_add(b, cJSON_IsTrue(v) ? "True" : "False", cJSON_IsTrue(v) ? 4 : 5);
    } else if (cJSON_IsNull(v)) {
        ct_buf_add(b, "None", 4);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        int obj = cJSON_IsObject(v);
        ct_buf_add(b, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (obj) {
                ct_buf_add(b, "'", 1);
                ct_buf_add(b, c->string, strlen(c->string));
                ct_buf_add(b, "': ", 3);
            }
            add_str(b, c, 1);
            if (c->next)
                ct_buf_add(b, ", ", 2);
        }
        ct_buf_add(b, obj ? "}" : "]", 1);
    } /* undefined: nothing */
}

void ct_add_str(ct_buf *b, const cJSON *v) { add_str(b, v, 0); }

/* ---- making values --------------------------------------------------------------- */

const cJSON *ct_string_n(ct_render *r, const char *s, size_t n)
{
    char *c = malloc(n + 1);
    if (!c)
        return ct_fail(r, "out of memory");
    memcpy(c, s, n);
    c[n] = '\0';
    cJSON *v = cJSON_CreateString(c);
    free(c);
    return ct_keep(r, v);
}
const cJSON *ct_string(ct_render *r, const char *s) { return ct_string_n(r, s, strlen(s)); }
const cJSON *ct_number(ct_render *r, double x) { return ct_keep(r, cJSON_CreateNumber(x)); }
const cJSON *ct_boolean(ct_render *r, int b) { return ct_keep(r, cJSON_CreateBool(b)); }

/* A list whose items are references to items[] (they stay where they are). */
const cJSON *ct_list_of(ct_render *r, const cJSON *const *items, int n)
{
    cJSON *a = ct_keep(r, cJSON_CreateArray());
    for (int i = 0; a && i < n; i++)
        if (!cJSON_AddItemReferenceToArray(a, (cJSON *)items[i]))
            return ct_fail(r, "out of memory");
    return a;
}

const cJSON *ct_str_of(ct_render *r, const cJSON *v)
{
    if (cJSON_IsString(v))
        return v;
    ct_buf b = { 0 };
    ct_add_str(&b, v);
    const cJSON *s = b.failed ? ct_fail(r, "out of memory") : ct_string_n(r, b.v ? b.v : "", b.n);
    free(b.v);
    return s;
}

int ct_equal(const cJSON *a, const cJSON *b)
{
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a) && cJSON_IsString(b))
        return strcmp(a->valuestring, b->valuestring) == 0;
    if (a == CT_UNDEFINED || b == CT_UNDEFINED)
        return a == b;
    return (a->type & 0xFF) == (b->type & 0xFF) && cJSON_Compare(a, b, 1);
}

/* The items of a list, the keys of a dict, the characters of a string,
 * into a new list. */
const cJSON *ct_items_of(ct_render *r, const cJSON *v)
{
    if (cJSON_IsArray(v))
        return v;
    cJSON *a = ct_keep(r, cJSON_CreateArray());
    if (a && cJSON_IsObject(v)) {
        for (const cJSON *c = v->child; c; c = c->next)
            if (!cJSON_AddItemToArray(a, cJSON_CreateString(c->string)))
                return ct_fail(r, "out of memory");
    } else if (a && cJSON_IsString(v)) {
        for (const char *s = v->valuestring; *s;) { /* a UTF-8 character each */
            size_t n = 1;
            while (((unsigned char)s[n] & 0xC0) == 0x80)
                n++;
            char ch[8] = { 0 };
            memcpy(ch, s, n < 7 ? n : 7);
            cJSON_AddItemToArray(a, cJSON_CreateString(ch));
            s += n;
        }
    } else if (a) {
        return ct_fail(r, "cannot iterate over %s", v == CT_UNDEFINED ? "an undefined value" : "this value");
    }
    return a;
}

/* JSON as Python's json.dumps writes it (", " and ": "; Hugging Face's tojson). */
void ct_add_json(ct_buf *b, const cJSON *v)
{
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        int obj = cJSON_IsObject(v);
        ct_buf_add(b, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (obj) {
                cJSON *k = cJSON_CreateString(c->string);
                char *s = k ? cJSON_PrintUnformatted(k) : NULL;
                if (s)
                    ct_buf_add(b, s, strlen(s)), ct_buf_add(b, ": ", 2);
                free(s);
                cJSON_Delete(k);
            }
            ct_add_json(b, c);
            if (c->next)
                ct_buf_add(b, ", ", 2);
        }
        ct_buf_add(b, obj ? "}" : "]", 1);
        return;
    }
    if (v == CT_UNDEFINED) {
        ct_buf_add(b, "null", 4);
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    if (s)
        ct_buf_add(b, s, strlen(s));
    else
        b->failed = 1;
    free(s);
}

const cJSON *ct_arg(const ct_args *a, int i, const char *key)
{
    for (int k = 0; k < a->n; k++)
        if (key && strcmp(a->key[k], key) == 0)
            return a->v[k];
    int pos = 0;
    for (int k = 0; k < a->n; k++)
        if (a->key[k][0] == '\0' && pos++ == i)
            return a->v[k];
    return NULL;
}

/* ---- functions ------------------------------------------------------------------ */

const cJSON *ct_call_function(ct_render *r, const char *name, const ct_args *a)
{
    if (!strcmp(name, "raise_exception")) {
        const cJSON *msg = ct_arg(a, 0, NULL);
        r->raised = 1;
        return ct_fail(r, "the chat template refused the conversation: %s",
                       cJSON_IsString(msg) ? msg->valuestring : "(no message)");
    }
    if (!strcmp(name, "namespace")) {
        cJSON *ns = ct_keep(r, cJSON_CreateObject());
        for (int k = 0; ns && k < a->n; k++) {
            cJSON *copy = cJSON_Duplicate(a->v[k], 1);
            if (!a->key[k][0] || !copy) {
                cJSON_Delete(copy);
                return ct_fail(r, "namespace() takes name=value arguments");
            }
            cJSON_AddItemToObject(ns, a->key[k], copy);
        }
        return ns;
    }
    if (!strcmp(name, "range")) {
        const cJSON *x = ct_arg(a, 0, NULL), *y = ct_arg(a, 1, NULL), *z = ct_arg(a, 2, NULL);
        if (!cJSON_IsNumber(x) || (y && !cJSON_IsNumber(y)) || (z && (!cJSON_IsNumber(z) || z->valuedouble == 0)))
            return ct_fail(r, "range() takes one to three numbers (a step not 0)");
        double lo = y ? x->valuedouble : 0, hi = y ? y->valuedouble : x->valuedouble, step = z ? z->valuedouble : 1;
        cJSON *list = ct_keep(r, cJSON_CreateArray());
        for (double i = lo; list && (step > 0 ? i < hi : i > hi) && cJSON_GetArraySize(list) < 100000; i += step)
            cJSON_AddItemToArray(list, cJSON_CreateNumber(i));
        return list;
    }
    return ct_fail(r, "'%s()' is not a function this renderer knows (raise_exception, namespace, range)", name);
}

/* ---- string and dict methods -------------------------------------------------- */

/* s stripped of chars (whitespace when NULL) at the left, the right or both. */
static const cJSON *strip(ct_render *r, const char *s, const cJSON *chars, int left, int right)
{
    const char *set = cJSON_IsString(chars) ? chars->valuestring : " \t\n\r\f\v";
    size_t a = 0, b = strlen(s);
    while (left && a < b && strchr(set, s[a]))
        a++;
    while (right && b > a && strchr(set, s[b - 1]))
        b--;
    return ct_string_n(r, s + a, b - a);
}

/* s.split(sep): by sep, or by runs of whitespace when sep is NULL. */
static const cJSON *split(ct_render *r, const char *s, const cJSON *sep)
{
    cJSON *list = ct_keep(r, cJSON_CreateArray());
    if (!list)
        return NULL;
    if (cJSON_IsString(sep) && sep->valuestring[0]) {
        size_t n = strlen(sep->valuestring);
        for (const char *at;; s = at + n) {
            at = strstr(s, sep->valuestring);
            char *part = strndup(s, at ? (size_t)(at - s) : strlen(s));
            if (!part || !cJSON_AddItemToArray(list, cJSON_CreateString(part)))
                return free(part), ct_fail(r, "out of memory");
            free(part);
            if (!at)
                break;
        }
        return list;
    }
    for (;;) {
        while (*s && strchr(" \t\n\r\f\v", *s))
            s++;
        if (!*s)
            return list;
        size_t n = strcspn(s, " \t\n\r\f\v");
        char *part = strndup(s, n);
        if (!part || !cJSON_AddItemToArray(list, cJSON_CreateString(part)))
            return free(part), ct_fail(r, "out of memory");
        free(part);
        s += n;
    }
}

/* s with every `from` replaced by `to`. */
static const cJSON *replace(ct_render *r, const char *s, const cJSON *from, const cJSON *to)
{
    if (!cJSON_IsString(from) || !cJSON_IsString(to) || !from->valuestring[0])
        return ct_fail(r, "replace() takes two strings, the first not empty");
    ct_buf b = { 0 };
    size_t n = strlen(from->valuestring);
    for (const char *at; (at = strstr(s, from->valuestring)); s = at + n) {
        ct_buf_add(&b, s, (size_t)(at - s));
        ct_buf_add(&b, to->valuestring, strlen(to->valuestring));
    }
    ct_buf_add(&b, s, strlen(s));
    const cJSON *v = b.failed ? ct_fail(r, "out of memory") : ct_string_n(r, b.v ? b.v : "", b.n);
    free(b.v);
    return v;
}

/* upper, lower, title or capitalize (ASCII letters: what the templates case). */
static const cJSON *recase(ct_render *r, const char *s, char how)
{
    char *c = strdup(s);
    if (!c)
        return ct_fail(r, "out of memory");
    for (size_t i = 0, word = 1; c[i]; i++) {
        int letter = (c[i] | 32) >= 'a' && (c[i] | 32) <= 'z';
        int up = how == 'U' || ((how == 't' || how == 'c') && word && letter && (how == 't' || i == 0));
        if (letter)
            c[i] = up ? (char)(c[i] & ~32) : how == 'U' ? c[i] : (char)(c[i] | 32);
        word = !letter;
    }
    const cJSON *v = ct_string(r, c);
    free(c);
    return v;
}

/* A dict's items() as [key, value] pairs, its keys() or values(). */
static const cJSON *dict_view(ct_render *r, const cJSON *d, char which)
{
    cJSON *list = ct_keep(r, cJSON_CreateArray());
    for (const cJSON *c = d->child; list && c; c = c->next) {
        cJSON *item = which == 'k'   ? cJSON_CreateString(c->string)
                      : which == 'v' ? cJSON_CreateObjectReference(c)
                                     : cJSON_CreateArray();
        if (which == 'v' && item) /* a reference to c's value, whatever its type */
            *item = *c, item->next = item->prev = NULL, item->string = NULL, item->type |= cJSON_IsReference;
        if (which == 'i' && item)
            cJSON_AddItemToArray(item, cJSON_CreateString(c->string)), cJSON_AddItemReferenceToArray(item, (cJSON *)c);
        if (!item || !cJSON_AddItemToArray(list, item))
            return ct_fail(r, "out of memory");
    }
    return list;
}

const cJSON *ct_call_method(ct_render *r, const cJSON *v, const char *name, const ct_args *a)
{
    const cJSON *x = ct_arg(a, 0, NULL), *y = ct_arg(a, 1, NULL);
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip"))
            return strip(r, s, x, name[0] != 'r', name[0] != 'l');
        if (!strcmp(name, "split"))
            return split(r, s, x);
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            if (!cJSON_IsString(x))
                return ct_fail(r, "%s() takes a string", name);
            size_t n = strlen(s), m = strlen(x->valuestring);
            return ct_boolean(r, m <= n && memcmp(name[0] == 's' ? s : s + n - m, x->valuestring, m) == 0);
        }
        if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize"))
            return recase(r, s, name[0] == 'u' ? 'U' : name[0] == 'l' ? 'l' : name[0]);
        if (!strcmp(name, "replace"))
            return replace(r, s, x, y);
        if (!strcmp(name, "join"))
            return ct_call_filter(r, x ? x : CT_UNDEFINED, "join", &(ct_args){ .v = { v }, .n = 1 });
    } else if (cJSON_IsObject(v)) {
        if (!strcmp(name, "get")) {
            const cJSON *c = cJSON_IsString(x) ? cJSON_GetObjectItemCaseSensitive(v, x->valuestring) : NULL;
            return c ? c : y ? y : ct_keep(r, cJSON_CreateNull());
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values"))
            return dict_view(r, v, name[0]);
    }
    return ct_fail(r, "no method '%s' on %s", name,
                   cJSON_IsString(v)   ? "a string"
                   : cJSON_IsObject(v) ? "a dict"
                   : cJSON_IsArray(v)  ? "a list"
                   : v == CT_UNDEFINED ? "an undefined value"
                                       : "this value");
}

/* ---- filters -------------------------------------------------------------------- */

/* selectattr / rejectattr: the items whose attribute passes the test (truthy without one). */
static const cJSON *select_attr(ct_render *r, const cJSON *v, const ct_args *a, int keep_if)
{
    const cJSON *attr = ct_arg(a, 0, NULL), *test = ct_arg(a, 1, NULL), *value = ct_arg(a, 2, NULL);
    const cJSON *items = ct_items_of(r, v);
    if (!items || !cJSON_IsString(attr) || (test && !cJSON_IsString(test)))
        return items ? ct_fail(r, "selectattr() takes an attribute name and a test's name") : NULL;
    int n = cJSON_GetArraySize(items), k = 0;
    const cJSON **kept = malloc(((size_t)n + 1) * sizeof *kept);
    if (!kept)
        return ct_fail(r, "out of memory");
    for (const cJSON *c = items->child; c; c = c->next) {
        const cJSON *field = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, attr->valuestring) : NULL;
        int pass = 0;
        if (!test)
            pass = field && ct_truthy(field);
        else if (ct_call_test(r, field ? field : CT_UNDEFINED, test->valuestring,
                              &(ct_args){ .v = { value }, .n = value ? 1 : 0 }, &pass) != 0)
            return free(kept), NULL;
        if (pass == keep_if)
            kept[k++] = c;
    }
    const cJSON *out = ct_list_of(r, kept, k);
    free(kept);
    return out;
}

const cJSON *ct_call_filter(ct_render *r, const cJSON *v, const char *name, const ct_args *a)
{
    const cJSON *x = ct_arg(a, 0, NULL);
    if (!strcmp(name, "trim") && cJSON_IsString(v))
        return strip(r, v->valuestring, x, 1, 1);
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        const cJSON *items = ct_items_of(r, v);
        return items ? ct_number(r, cJSON_GetArraySize(items)) : NULL;
    }
    if ((!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize")) &&
        cJSON_IsString(v))
        return recase(r, v->valuestring, name[0] == 'u' ? 'U' : name[0] == 'l' ? 'l' : name[0]);
    if (!strcmp(name, "tojson")) {
        ct_buf b = { 0 };
        ct_add_json(&b, v);
        const cJSON *s = b.failed ? ct_fail(r, "out of memory") : ct_string_n(r, b.v ? b.v : "", b.n);
        free(b.v);
        return s;
    }
    if (!strcmp(name, "string"))
        return ct_str_of(r, v);
    if (!strcmp(name, "safe"))
        return v;
    if (!strcmp(name, "int") || !strcmp(name, "float")) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : cJSON_IsString(v) ? strtod(v->valuestring, NULL) : 0;
        return ct_number(r, name[0] == 'i' ? trunc(d) : d);
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const cJSON *falsy = ct_arg(a, 1, "boolean");
        int use = v == CT_UNDEFINED || (falsy && ct_truthy(falsy) && !ct_truthy(v));
        return use ? (x ? x : ct_string(r, "")) : v;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last") || !strcmp(name, "list") || !strcmp(name, "reverse") ||
        !strcmp(name, "join")) {
        const cJSON *items = ct_items_of(r, v);
        if (!items)
            return NULL;
        int n = cJSON_GetArraySize(items);
        if (name[0] == 'f' || (name[0] == 'l' && name[1] == 'a')) {
            const cJSON *c = n ? cJSON_GetArrayItem(items, name[0] == 'f' ? 0 : n - 1) : NULL;
            return c ? c : CT_UNDEFINED;
        }
        if (name[0] == 'j') {
            ct_buf b = { 0 };
            for (const cJSON *c = items->child; c; c = c->next) {
                ct_add_str(&b, c);
                if (c->next && cJSON_IsString(x))
                    ct_buf_add(&b, x->valuestring, strlen(x->valuestring));
            }
            const cJSON *s = b.failed ? ct_fail(r, "out of memory") : ct_string_n(r, b.v ? b.v : "", b.n);
            free(b.v);
            return s;
        }
        const cJSON **all = malloc(((size_t)n + 1) * sizeof *all);
        if (!all)
            return ct_fail(r, "out of memory");
        int k = 0;
        for (const cJSON *c = items->child; c; c = c->next)
            all[k++] = c;
        for (int i = 0; name[0] == 'r' && i < k / 2; i++) {
            const cJSON *t = all[i];
            all[i] = all[k - 1 - i], all[k - 1 - i] = t;
        }
        const cJSON *out = ct_list_of(r, all, k);
        free(all);
        return out;
    }
    if (!strcmp(name, "items") && cJSON_IsObject(v))
        return dict_view(r, v, 'i');
    if (!strcmp(name, "replace") && cJSON_IsString(v))
        return replace(r, v->valuestring, x, ct_arg(a, 1, NULL));
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_attr(r, v, a, name[0] == 's');
    if (!strcmp(name, "map") && ct_arg(a, 0, "attribute")) {
        const cJSON *attr = ct_arg(a, 0, "attribute"), *items = ct_items_of(r, v);
        cJSON *list = items && cJSON_IsString(attr) ? ct_keep(r, cJSON_CreateArray()) : NULL;
        for (const cJSON *c = list ? items->child : NULL; c; c = c->next) {
            const cJSON *f = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, attr->valuestring) : NULL;
            cJSON_AddItemToArray(list, f ? cJSON_Duplicate(f, 1) : cJSON_CreateNull());
        }
        return list ? list : ct_fail(r, "map() takes attribute=NAME");
    }
    return ct_fail(r, "'%s' is not a filter this renderer knows for this value", name);
}

/* ---- tests ---------------------------------------------------------------------- */

int ct_call_test(ct_render *r, const cJSON *v, const char *name, const ct_args *a, int *out)
{
    const cJSON *x = ct_arg(a, 0, NULL);
    int num = cJSON_IsNumber(v);
    double d = num ? v->valuedouble : 0;
    if (!strcmp(name, "defined"))
        *out = v != CT_UNDEFINED;
    else if (!strcmp(name, "undefined"))
        *out = v == CT_UNDEFINED;
    else if (!strcmp(name, "none"))
        *out = cJSON_IsNull(v);
    else if (!strcmp(name, "string"))
        *out = cJSON_IsString(v);
    else if (!strcmp(name, "number"))
        *out = num;
    else if (!strcmp(name, "integer"))
        *out = num && d == floor(d);
    else if (!strcmp(name, "float"))
        *out = num && d != floor(d);
    else if (!strcmp(name, "boolean"))
        *out = cJSON_IsBool(v);
    else if (!strcmp(name, "true") || !strcmp(name, "false"))
        *out = cJSON_IsBool(v) && cJSON_IsTrue(v) == (name[0] == 't');
    else if (!strcmp(name, "mapping"))
        *out = cJSON_IsObject(v);
    else if (!strcmp(name, "iterable") || !strcmp(name, "sequence"))
        *out = cJSON_IsArray(v) || cJSON_IsString(v) || cJSON_IsObject(v);
    else if (!strcmp(name, "odd") || !strcmp(name, "even"))
        *out = num && fmod(fabs(d), 2) == (name[0] == 'o' ? 1 : 0);
    else if (!strcmp(name, "divisibleby") && cJSON_IsNumber(x) && x->valuedouble != 0)
        *out = num && fmod(d, x->valuedouble) == 0;
    else if ((!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "sameas")) && x)
        *out = ct_equal(v, x);
    else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        *out = cJSON_IsString(v);
        for (const char *s = *out ? v->valuestring : ""; *s; s++)
            if ((*s | 32) >= 'a' && (*s | 32) <= 'z' && ((*s & 32) != 0) != (name[0] == 'l'))
                *out = 0;
    } else
        return ct_fail(r, "'%s' is not a test this renderer knows (defined, none, string, number, mapping, ...)", name),
               -1;
    return 0;
}
