/* model_input.c: what fusionc's commands read a model from (model_input.h). */
#include "model_input.h"

#include <stdlib.h>
#include <string.h>

#include "../frontend/model.h"
#include "../frontend/xml_util.h"

int model_input_classify(const char *path, const char *buf, size_t len, input_kind *kind, struct diag *err)
{
    size_t skip = 0, path_len = strlen(path);
    for (;;) {
        while (skip < len && (buf[skip] == ' ' || buf[skip] == '\n' || buf[skip] == '\t' || buf[skip] == '\r'))
            skip++;
        if (skip >= len || buf[skip] != '#')
            break;
        while (skip < len && buf[skip] != '\n')
            skip++;
    }
    if ((len - skip >= 9 && memcmp(buf + skip, "fusion-ir", 9) == 0) ||
        (path_len > 4 && strcmp(path + path_len - 4, ".fir") == 0)) {
        *kind = INPUT_IR;
        return 0;
    }
    xmlDocPtr doc = xml_read(path, buf, len, err);
    if (!doc)
        return -1;
    xmlNodePtr root = xmlDocGetRootElement(doc);
    const char *name = root ? (const char *)root->name : "";
    int rc = 0;
    if (strcmp(name, "model") == 0)
        *kind = INPUT_MODEL;
    else if (strcmp(name, "cluster") == 0)
        *kind = INPUT_CLUSTER;
    else
        rc = diag_set(err, path, root ? xml_line(root) : 1, "expected a <model> or a <cluster> document, found <%s>",
                      name);
    xmlFreeDoc(doc);
    return rc;
}

int model_input_load(const char *path, const options *o, ir_graph *g, struct diag *err)
{
    char *buf = NULL;
    size_t len = 0;
    input_kind kind;
    ir_graph_init(g);
    if (xml_read_file(path, &buf, &len, err))
        return -1;
    int rc = model_input_classify(path, buf, len, &kind, err);
    if (rc == 0 && kind == INPUT_CLUSTER)
        rc = diag_set(err, path, 0, "this is a cluster file; expected a model");
    if (rc == 0 && kind == INPUT_IR && o->sets.n > 0)
        rc = diag_set(err, path, 0, "--set applies to model XML files, not to text IR");
    if (rc == 0 && kind == INPUT_IR)
        rc = ir_graph_parse(buf, len, path, g, err);
    if (rc == 0 && kind == INPUT_MODEL)
        rc = model_load_memory(buf, len, path, o->sets.v, o->sets.n, g, err);
    free(buf);
    return rc;
}
