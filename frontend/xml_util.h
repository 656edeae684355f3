/* xml_util.h: reading and validating XML with libxml2, quietly.
 *
 * libxml2 prints its own errors to stderr by default; fusion instead keeps
 * the first error (with its line) in a `struct diag` so the user sees one
 * line in the compiler's format.  Network access is off, entities are not
 * expanded, and line numbers above 65535 are kept (XML_PARSE_BIG_LINES).
 */
#ifndef FUSION_XML_UTIL_H
#define FUSION_XML_UTIL_H

#include <stddef.h>

#include <libxml/tree.h>

#include "../ir/diag.h"

#define XML_FILE_MAX_BYTES (64 << 20) /* a model or cluster file larger than this is refused */

/* Read `path` (buf == NULL) or the `len` bytes at buf (then `path` only names
 * it in messages).  Returns the document, or NULL with err filled: a missing
 * or unreadable file, an empty or binary one, malformed XML. */
xmlDocPtr xml_read(const char *path, const char *buf, size_t len, struct diag *err);

/* Read a whole file into a malloc'd, NUL-terminated buffer (files above
 * XML_FILE_MAX_BYTES and directories are refused with a message). */
int xml_read_file(const char *path, char **out, size_t *out_len, struct diag *err);

/* Validate doc against an XSD held in memory (see scripts/embed.cmake).
 * The first violation is reported with its line. */
int xml_validate(xmlDocPtr doc, const unsigned char *xsd, unsigned xsd_len, const char *path, struct diag *err);

/* Copy attribute `name` of node into buf.  Returns 1 if present, 0 if not
 * (buf then ""), -1 if longer than size-1 (err filled with the line). */
int xml_attr(xmlNodePtr node, const char *name, char *buf, size_t size, const char *path, struct diag *err);

/* The element's name when it is an element, else NULL. */
const char *xml_element_name(xmlNodePtr node);

/* The node's source line. */
int xml_line(xmlNodePtr node);

#endif
