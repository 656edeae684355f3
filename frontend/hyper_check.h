/* hyper_check.h: refuse a model's hyper-parameter that nothing reads (a
 * typo such as learnig_rate), naming the nearest one that is read. */
#ifndef FUSION_HYPER_CHECK_H
#define FUSION_HYPER_CHECK_H

#include <libxml/tree.h>

struct diag;

/* root: the <model> element.  0, or -1 with err at the hyper's line. */
int hyper_check_read(xmlNodePtr root, const char *path, struct diag *err);

#endif
