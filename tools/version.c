/* version.c: `fusionc --version`: this build's version and commit, and the
 * versions of the libraries that shape its results (the code generator's
 * LLVM, the CPU kernels' OpenBLAS, the links' libsodium and nanomsg, the
 * XML parser, NVRTC when it loads), so that a bug report or a measurement
 * names what it ran on. */
#include "version.h"

#include <libxml/xmlversion.h>
#include <sodium.h>

#include "../codegen/nvrtc.h"
#include "../ir/diag.h"
#include "fusion_commit.h" /* FUSION_COMMIT, written at build time (scripts/commit.cmake) */

char *openblas_get_config(void); /* OpenBLAS's own: "OpenBLAS 0.3.21 DYNAMIC_ARCH ..." */

void version_print(FILE *f)
{
    struct diag err = { 0 };
    const char *nvrtc = nvrtc_version_string(&err);
    fprintf(f,
            "fusionc %s (commit %s)\n"
            "  LLVM      %s (the host programs' code generator)\n"
            "  OpenBLAS  %s\n"
            "  libsodium %s\n"
            "  nanomsg   %s\n"
            "  libxml2   %s\n"
            "  NVRTC     %s\n",
            FUSION_VERSION, FUSION_COMMIT, FUSION_LLVM_VERSION, openblas_get_config(), sodium_version_string(),
            FUSION_NANOMSG_VERSION[0] ? FUSION_NANOMSG_VERSION : "(version unknown)", LIBXML_DOTTED_VERSION,
            nvrtc ? nvrtc : "not found (CUDA bundles cannot be compiled here)");
}
