/* cluster_name.c: cluster_name_valid (cluster.h), in a file of its own:
 * programs that check a name but read no cluster file (fusion-probe,
 * through profile.c) link it without libxml2. */
#include <string.h>

#include "cluster.h"

int cluster_name_valid(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return 0;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}
