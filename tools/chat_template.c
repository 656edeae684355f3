/* chat_template.c: the Jinja that chat templates use (chat_template.h).
 *
 * The template is cut into pieces (text, {{ output }}, {% tag %}) with
 * Jinja's whitespace rules as Hugging Face sets them (trim_blocks and
 * lstrip_blocks on, one trailing newline dropped); each if and for tag
 * knows where its next branch or its end is, so running a block is a walk
 * over its pieces.  Expressions are parsed and evaluated in one recursive
 * descent (chat_template_expr.c), `live` off where a branch is not taken
 * (the short-circuits of and, or and the inline if).  Every value the
 * renderer makes is kept in a pool until the render ends, so values are
 * shared freely and never freed one by one. */
#include "chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat_template_internal.h"

/* ---- the pieces ----------------------------------------------------------------- */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static int add_piece(ct_template *t, ct_piece_kind kind, const char *s, size_t len, int line)
{
    if (t->n == t->cap) {
        size_t cap = t->cap * 2 + 32;
        ct_piece *grown = realloc(t->pieces, cap * sizeof *grown);
        if (!grown)
            return -1;
        t->pieces = grown, t->cap = cap;
    }
    t->pieces[t->n++] = (ct_piece){ .kind = kind, .s = s, .len = len, .line = line, .next = -1 };
    return 0;
}

static int count_lines(const char *from, const char *to)
{
    int n = 0;
    for (; from < to; from++)
        n += *from == '\n';
    return n;
}

/* The template into pieces, with Jinja's whitespace control: "{%-" and
 * "-%}" (and the same on {{ }} and {# #}) strip the whitespace before and
 * after; a block tag or comment drops the one newline after it
 * (trim_blocks) and the spaces and tabs before it on its line
 * (lstrip_blocks, unless "{%+").  0, or -1 with why. */
static int cut(const char *text, size_t len, ct_template *t, char *why, size_t n)
{
    if (len > 0 && text[len - 1] == '\n') /* keep_trailing_newline off */
        len--;
    const char *p = text, *end = text + len;
    int line = 1, strip_next = 0;
    while (p < end) {
        const char *open = p;
        while (open + 1 < end && !(open[0] == '{' && (open[1] == '{' || open[1] == '%' || open[1] == '#')))
            open++;
        if (open + 1 >= end)
            open = end;
        const char *text_start = p, *text_end = open;
        if (strip_next)
            while (text_start < text_end && is_space(*text_start))
                text_start++;
        strip_next = 0;
        if (open < end) {
            char kind = open[1];
            int minus = open + 2 < end && open[2] == '-', plus = open + 2 < end && open[2] == '+';
            if (minus)
                while (text_end > text_start && is_space(text_end[-1]))
                    text_end--;
            else if (kind != '{' && !plus) { /* lstrip_blocks: spaces and tabs from the line's start */
                const char *q = text_end;
                while (q > text_start && (q[-1] == ' ' || q[-1] == '\t'))
                    q--;
                if (q == text || q[-1] == '\n')
                    text_end = q;
            }
        }
        if (text_end > text_start && add_piece(t, CT_TEXT, text_start, (size_t)(text_end - text_start), line))
            return snprintf(why, n, "out of memory"), -1;
        line += count_lines(p, open);
        if (open >= end)
            break;
        char kind = open[1];
        const char *close_tag = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
        const char *body = open + 2 + (open + 2 < end && (open[2] == '-' || open[2] == '+'));
        const char *close = body;
        if (kind == '#') {
            while (close + 1 < end && !(close[0] == '#' && close[1] == '}'))
                close++;
        } else { /* a close inside a string literal does not count */
            char quote = 0;
            for (; close + 1 < end; close++) {
                if (quote) {
                    if (*close == '\\' && close + 1 < end)
                        close++;
                    else if (*close == quote)
                        quote = 0;
                } else if (*close == '\'' || *close == '"') {
                    quote = *close;
                } else if (close[0] == close_tag[0] && close[1] == close_tag[1]) {
                    break;
                }
            }
        }
        if (close + 1 >= end)
            return snprintf(why, n, "line %d: '%.2s' without its '%s'", line, open, close_tag), -1;
        const char *body_end = close;
        if (body_end > body && body_end[-1] == '-') {
            body_end--;
            strip_next = 1;
        }
        if (kind != '#' && add_piece(t, kind == '{' ? CT_OUTPUT : CT_TAG, body, (size_t)(body_end - body), line))
            return snprintf(why, n, "out of memory"), -1;
        line += count_lines(open, close + 2);
        p = close + 2;
        if (kind != '{' && !strip_next && p < end && *p == '\n') { /* trim_blocks */
            p++;
            line++;
        }
    }
    return 0;
}

/* A tag's first word into word[] (empty for none). */
static void tag_word(const ct_piece *pc, char *word, size_t n)
{
    size_t i = 0, k = 0;
    while (i < pc->len && is_space(pc->s[i]))
        i++;
    while (i < pc->len && k + 1 < n && (pc->s[i] == '_' || ((pc->s[i] | 32) >= 'a' && (pc->s[i] | 32) <= 'z')))
        word[k++] = pc->s[i++];
    word[k] = '\0';
}

/* Each if, elif and else tag's `next`: the next branch or the endif; each
 * for's: its endfor.  0, or -1 with why. */
static int link_blocks(ct_template *t, char *why, size_t n)
{
    int stack[CT_MAX_DEPTH], depth = 0;
    for (int i = 0; i < (int)t->n; i++) {
        ct_piece *pc = &t->pieces[i];
        if (pc->kind != CT_TAG)
            continue;
        tag_word(pc, pc->word, sizeof pc->word);
        const char *w = pc->word;
        int opens = strcmp(w, "if") == 0 || strcmp(w, "for") == 0 || strcmp(w, "generation") == 0;
        int branch = strcmp(w, "elif") == 0 || strcmp(w, "else") == 0;
        int closes = strcmp(w, "endif") == 0 || strcmp(w, "endfor") == 0 || strcmp(w, "endgeneration") == 0;
        if (branch || closes) {
            const char *want = strcmp(w, "endfor") == 0 ? "for" : strcmp(w, "endgeneration") == 0 ? "generation" : "if";
            const char *top = depth > 0 ? t->pieces[stack[depth - 1]].word : "";
            int matches = strcmp(top, want) == 0 ||
                          (strcmp(want, "if") == 0 && (strcmp(top, "elif") == 0 || strcmp(top, "else") == 0));
            if (!matches)
                return snprintf(why, n, "line %d: '%s' without its '%s'", pc->line, w, want), -1;
            t->pieces[stack[depth - 1]].next = i;
            depth--;
        }
        if (opens || branch) {
            if (depth == CT_MAX_DEPTH)
                return snprintf(why, n, "line %d: blocks nested deeper than %d", pc->line, CT_MAX_DEPTH), -1;
            stack[depth++] = i;
        }
    }
    if (depth > 0)
        return snprintf(why, n, "line %d: '%s' without its end", t->pieces[stack[depth - 1]].line,
                        t->pieces[stack[depth - 1]].word),
               -1;
    return 0;
}

/* ---- running the pieces ------------------------------------------------------- */

static int run(ct_render *r, int from, int to);

static int run_if(ct_render *r, int i, int *after)
{
    const ct_template *t = r->t;
    int taken = 0, j = i;
    while (t->pieces[j].kind == CT_TAG && strcmp(t->pieces[j].word, "endif") != 0) {
        const ct_piece *pc = &t->pieces[j];
        int take = !taken && strcmp(pc->word, "else") == 0;
        if (!taken && strcmp(pc->word, "else") != 0) {
            r->line = pc->line;
            size_t at = ct_tag_rest(pc);
            const cJSON *cond = ct_eval(r, pc->s + at, pc->len - at);
            if (!cond)
                return -1;
            take = ct_truthy(cond);
        }
        if (take) {
            taken = 1;
            if (run(r, j + 1, pc->next) != 0)
                return -1;
            if (r->jump)
                break;
        }
        j = pc->next;
    }
    while (t->pieces[j].kind != CT_TAG || strcmp(t->pieces[j].word, "endif") != 0)
        j = t->pieces[j].next;
    *after = j + 1;
    return 0;
}

static int run(ct_render *r, int from, int to)
{
    const ct_template *t = r->t;
    for (int i = from; i < to && !r->jump;) {
        const ct_piece *pc = &t->pieces[i];
        r->line = pc->line;
        if (pc->kind == CT_TEXT) {
            ct_buf_add(&r->out, pc->s, pc->len);
            i++;
        } else if (pc->kind == CT_OUTPUT) {
            const cJSON *v = ct_eval(r, pc->s, pc->len);
            if (!v)
                return -1;
            ct_add_str(&r->out, v);
            i++;
        } else if (strcmp(pc->word, "if") == 0) {
            if (run_if(r, i, &i) != 0)
                return -1;
        } else if (strcmp(pc->word, "for") == 0) {
            if (ct_run_for(r, i, run) != 0)
                return -1;
            i = pc->next + 1;
        } else if (strcmp(pc->word, "set") == 0) {
            if (ct_run_set(r, pc) != 0)
                return -1;
            i++;
        } else if (strcmp(pc->word, "break") == 0 || strcmp(pc->word, "continue") == 0) {
            if (r->loops == 0)
                return ct_fail(r, "'%s' outside a for loop", pc->word), -1;
            r->jump = pc->word[0] == 'b' ? CT_BREAK : CT_CONTINUE;
        } else if (strcmp(pc->word, "generation") == 0 || strcmp(pc->word, "endgeneration") == 0) {
            i++; /* Hugging Face's marks for the assistant's tokens: the text is the same */
        } else {
            return ct_fail(r, "'%s' is not a tag this renderer knows (if, for, set, break, continue)",
                           pc->word[0] ? pc->word : "(none)"),
                   -1;
        }
        if (r->out.failed)
            return ct_fail(r, "out of memory"), -1;
    }
    return r->failed ? -1 : 0;
}

char *chat_template_render(const char *template_text, const cJSON *context, char *why, size_t why_len)
{
    ct_template t = { 0 };
    ct_render r = { .t = &t, .context = context };
    char *out = NULL;
    if (cut(template_text, strlen(template_text), &t, why, why_len) == 0 && link_blocks(&t, why, why_len) == 0) {
        if (run(&r, 0, (int)t.n) == 0 && !r.failed) {
            out = r.out.v ? r.out.v : strdup("");
            r.out.v = NULL;
            if (!out)
                snprintf(why, why_len, "out of memory");
        } else {
            snprintf(why, why_len, "%s", r.why);
        }
    }
    for (size_t i = 0; i < r.n_pool; i++)
        cJSON_Delete(r.pool[i]);
    free(r.pool);
    free(r.out.v);
    free(r.vars);
    free(t.pieces);
    return out;
}

/* ---- files: a template, a conversation, the tokenizer's config ---------------- */

char *chat_template_read_file(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 65536 + 1 > cap) {
            char *grown = realloc(buf, cap = n + 65536 * 2 + 1);
            if (!grown) {
                free(buf);
                if (f != stdin)
                    fclose(f);
                return NULL;
            }
            buf = grown;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    if (f != stdin)
        fclose(f);
    buf[n] = '\0';
    return buf;
}

int chat_template_load(const char *path, char **template_text, cJSON *context, char *why, size_t why_len)
{
    static const char *const special[] = { "bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token" };
    *template_text = NULL;
    char config[4096];
    struct stat st;
    const char *slash = strrchr(path, '/');
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(config, sizeof config, "%s/tokenizer_config.json", path);
    else
        snprintf(config, sizeof config, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0, path);
    char *text = chat_template_read_file(config);
    if (!text)
        return 0; /* no config: no template, no special tokens */
    cJSON *c = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(c)) {
        cJSON_Delete(c);
        return snprintf(why, why_len, "%s: not a JSON object", config), -1;
    }
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, special[k]);
        if (cJSON_IsObject(t))
            t = cJSON_GetObjectItemCaseSensitive(t, "content");
        if (cJSON_IsString(t) && t->valuestring[0])
            cJSON_AddStringToObject(context, special[k], t->valuestring);
    }
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(c, "chat_template"), *each;
    if (cJSON_IsArray(tpl)) /* named templates: the default one */
        cJSON_ArrayForEach(each, tpl)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(each, "name");
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
                tpl = cJSON_GetObjectItemCaseSensitive(each, "template");
        }
    int rc = 0;
    if (cJSON_IsString(tpl) && !(*template_text = strdup(tpl->valuestring))) {
        snprintf(why, why_len, "out of memory");
        rc = -1;
    }
    cJSON_Delete(c);
    return rc;
}
