/* version.h: what `fusionc --version` prints. */
#ifndef FUSION_TOOLS_VERSION_H
#define FUSION_TOOLS_VERSION_H

#include <stdio.h>

/* The version, the commit and the libraries' versions, a line each. */
void version_print(FILE *f);

#endif
