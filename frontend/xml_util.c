/* xml_util.c: quiet libxml2 reading and XSD validation (see xml_util.h). */
#define _GNU_SOURCE /* memmem */
#include "xml_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libxml/parser.h>
#include <libxml/xmlschemas.h>

/* Collects the first libxml2 error; later ones are usually consequences. */
typedef struct {
    const char *path;
    struct diag *err;
    int seen;
} first_error;

static void keep_first_error(void *ctx, xmlErrorPtr e)
{
    first_error *fe = ctx;
    if (fe->seen || !e)
        return;
    fe->seen = 1;
    char msg[DIAG_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", e->message ? e->message : "invalid XML");
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    diag_set(fe->err, fe->path, e->line, "%s", msg);
}

int xml_read_file(const char *path, char **out, size_t *out_len, struct diag *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return diag_set(err, path, 0, "cannot open file: %s", strerror(errno));
    if (S_ISDIR(st.st_mode))
        return diag_set(err, path, 0, "cannot read: is a directory");
    if (st.st_size > XML_FILE_MAX_BYTES)
        return diag_set(err, path, 0, "file is %lld bytes, larger than the %d-byte limit", (long long)st.st_size,
                        XML_FILE_MAX_BYTES);
    FILE *f = fopen(path, "rb");
    if (!f)
        return diag_set(err, path, 0, "cannot open file: %s", strerror(errno));
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        fclose(f);
        return diag_set(err, path, 0, "out of memory reading the file");
    }
    size_t n = fread(buf, 1, (size_t)st.st_size, f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return diag_set(err, path, 0, "read error");
    }
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return 0;
}

/* The line of a <!DOCTYPE in the prolog (before the root element), or 0.
 * A DTD could declare entities (expansion bombs, external files), and model
 * and cluster files have no use for one, so it is refused before libxml2
 * parses it. */
static int doctype_line(const char *buf, size_t len)
{
    int line = 1;
    size_t i = 0;
    while (i < len) {
        if (buf[i] == '\n') {
            line++;
            i++;
        } else if (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r') {
            i++;
        } else if (len - i >= 4 && memcmp(buf + i, "<!--", 4) == 0) { /* comment */
            const char *end = memmem(buf + i + 4, len - i - 4, "-->", 3);
            size_t stop = end ? (size_t)(end - buf) + 3 : len;
            for (; i < stop; i++)
                line += buf[i] == '\n';
        } else if (len - i >= 2 && memcmp(buf + i, "<?", 2) == 0) { /* declaration, PI */
            const char *end = memmem(buf + i + 2, len - i - 2, "?>", 2);
            size_t stop = end ? (size_t)(end - buf) + 2 : len;
            for (; i < stop; i++)
                line += buf[i] == '\n';
        } else if (len - i >= 9 && memcmp(buf + i, "<!DOCTYPE", 9) == 0) {
            return line;
        } else {
            return 0; /* the root element (or not XML at all): no DTD can follow */
        }
    }
    return 0;
}

xmlDocPtr xml_read(const char *path, const char *buf, size_t len, struct diag *err)
{
    char *owned = NULL;
    if (!buf) {
        if (xml_read_file(path, &owned, &len, err) != 0)
            return NULL;
        buf = owned;
    }
    size_t blank = 0;
    while (blank < len && (buf[blank] == ' ' || buf[blank] == '\t' || buf[blank] == '\r' || buf[blank] == '\n'))
        blank++;
    if (blank == len) {
        free(owned);
        diag_set(err, path, 0,
                 len == 0 ? "file is empty: expected an XML document"
                          : "file holds only white space: expected an XML document");
        return NULL;
    }
    if (len > XML_FILE_MAX_BYTES) {
        free(owned);
        diag_set(err, path, 0, "input larger than the %d-byte limit", XML_FILE_MAX_BYTES);
        return NULL;
    }
    const char *nul = memchr(buf, '\0', len);
    if (nul) {
        int line = 1;
        for (const char *p = buf; p < nul; p++)
            line += *p == '\n';
        free(owned);
        diag_set(err, path, line, "binary data (a NUL byte): expected an XML document");
        return NULL;
    }
    int dtd_line = doctype_line(buf, len);
    if (dtd_line > 0) {
        free(owned);
        diag_set(err, path, dtd_line, "<!DOCTYPE> is not allowed: model and cluster files take no DTD or entities");
        return NULL;
    }
    first_error fe = { path, err, 0 };
    xmlSetStructuredErrorFunc(&fe, keep_first_error);
    xmlDocPtr doc =
        xmlReadMemory(buf, (int)len, path, NULL, XML_PARSE_NONET | XML_PARSE_BIG_LINES | XML_PARSE_NOWARNING);
    xmlSetStructuredErrorFunc(NULL, NULL);
    free(owned);
    if (!doc || fe.seen) {
        if (!fe.seen)
            diag_set(err, path, 1, "not a well-formed XML document");
        if (doc)
            xmlFreeDoc(doc);
        return NULL;
    }
    if (doc->intSubset || doc->extSubset) { /* doctype_line missed it: refuse all the same */
        diag_set(err, path, 1, "<!DOCTYPE> is not allowed: model and cluster files take no DTD or entities");
        xmlFreeDoc(doc);
        return NULL;
    }
    return doc;
}

int xml_validate(xmlDocPtr doc, const unsigned char *xsd, unsigned xsd_len, const char *path, struct diag *err)
{
    first_error fe = { "<built-in schema>", err, 0 };
    xmlSchemaParserCtxtPtr pctx = xmlSchemaNewMemParserCtxt((const char *)xsd, (int)xsd_len);
    if (!pctx)
        return diag_set(err, path, 0, "internal error: cannot load the built-in schema");
    xmlSchemaSetParserStructuredErrors(pctx, keep_first_error, &fe);
    xmlSchemaPtr schema = xmlSchemaParse(pctx);
    xmlSchemaFreeParserCtxt(pctx);
    if (!schema) {
        if (!fe.seen)
            diag_set(err, path, 0, "internal error: the built-in schema does not parse");
        return -1;
    }
    xmlSchemaValidCtxtPtr vctx = xmlSchemaNewValidCtxt(schema);
    if (!vctx) {
        xmlSchemaFree(schema);
        return diag_set(err, path, 0, "out of memory validating");
    }
    fe.path = path;
    xmlSchemaSetValidStructuredErrors(vctx, keep_first_error, &fe);
    int rc = xmlSchemaValidateDoc(vctx, doc);
    xmlSchemaFreeValidCtxt(vctx);
    xmlSchemaFree(schema);
    if (rc != 0) {
        if (!fe.seen)
            diag_set(err, path, 0, "does not match the schema");
        return -1;
    }
    return 0;
}

int xml_attr(xmlNodePtr node, const char *name, char *buf, size_t size, const char *path, struct diag *err)
{
    buf[0] = '\0';
    xmlChar *v = xmlGetProp(node, (const xmlChar *)name);
    if (!v)
        return 0;
    size_t n = strlen((const char *)v);
    if (n >= size) {
        xmlFree(v);
        return diag_set(err, path, xml_line(node), "attribute '%s' is %zu characters long, more than %zu", name, n,
                        size - 1);
    }
    memcpy(buf, v, n + 1);
    xmlFree(v);
    return 1;
}

const char *xml_element_name(xmlNodePtr node)
{
    return node && node->type == XML_ELEMENT_NODE ? (const char *)node->name : NULL;
}

int xml_line(xmlNodePtr node) { return node ? (int)xmlGetLineNo(node) : 0; }
