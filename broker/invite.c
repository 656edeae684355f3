/* invite.c: invites and provider frames (invite.h). */
#include "invite.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../runtime/atomic_file.h"
#include "../runtime/comm/seal.h"

void invite_token(const uint8_t *secret, uint32_t id, uint8_t token[32])
{
    fu_seal_init();
    crypto_kdf_derive_from_key(token, 32, id, "fuinvite", secret);
}

int invite_write(const char *path, const invite *v, char *err, size_t n)
{
    char hex[65], text[512];
    sodium_bin2hex(hex, sizeof hex, v->token, sizeof v->token);
    int len = snprintf(text, sizeof text, "fusion-invite 1\nbroker %s\ninvite %u\ntoken %s\n", v->url, v->id, hex);
    sodium_memzero(hex, sizeof hex);
    atomic_file a;
    FILE *f = atomic_open(&a, path, err, n);
    if (!f)
        return -1;
    fwrite(text, 1, (size_t)len, f);
    sodium_memzero(text, sizeof text);
    return atomic_commit(&a, 0600, err, n);
}

int invite_read(const char *path, invite *v, char *err, size_t n)
{
    memset(v, 0, sizeof *v);
    struct stat st;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077)) {
        snprintf(err, n, "%s: mode %03o lets others read an invite: chmod 600 it", path, (unsigned)(st.st_mode & 0777));
        fclose(f);
        return -1;
    }
    static const char *const expect[] = { "fusion-invite 1", "broker tcp://HOST:PORT", "invite N",
                                          "token <64 hex digits>" };
    char line[512], hex[80] = "";
    unsigned id = 0;
    int k = 0, bad = 0;
    for (; k < 4 && !bad && fgets(line, sizeof line, f); k++) {
        line[strcspn(line, "\n")] = '\0';
        if (k == 0)
            bad = strcmp(line, "fusion-invite 1") != 0;
        else if (k == 1)
            bad = sscanf(line, "broker %299s", v->url) != 1 || strncmp(v->url, "tcp://", 6) != 0;
        else if (k == 2)
            bad = sscanf(line, "invite %u", &id) != 1 || id == 0;
        else
            bad = sscanf(line, "token %79s", hex) != 1 || strlen(hex) != 64 ||
                  sodium_hex2bin(v->token, sizeof v->token, hex, 64, NULL, NULL, NULL) != 0;
    }
    fclose(f);
    sodium_memzero(hex, sizeof hex);
    if (bad || k < 4) {
        int at = bad ? k : k + 1;
        snprintf(err, n, "%s:%d: not an invite: line %d should be '%s'", path, at, at, expect[at - 1]);
        return -1;
    }
    v->id = id;
    return 0;
}

size_t invite_seal_request(const invite *v, const void *msg, size_t len, uint8_t *out, uint8_t *nonce)
{
    memcpy(out, "FPV1", 4);
    for (int i = 0; i < 4; i++)
        out[4 + i] = (uint8_t)(v->id >> (8 * i));
    fu_box_seal(v->token, "provider request", NULL, 0, msg, len, out + INVITE_HEADER, nonce);
    return len + INVITE_HEADER + FU_BOX_OVERHEAD;
}

int invite_frame_id(const uint8_t *frame, size_t len, uint32_t *id)
{
    if (len < INVITE_HEADER + FU_BOX_OVERHEAD || memcmp(frame, "FPV1", 4) != 0)
        return 0;
    *id = (uint32_t)frame[4] | (uint32_t)frame[5] << 8 | (uint32_t)frame[6] << 16 | (uint32_t)frame[7] << 24;
    return 1;
}

int invite_open_request(const uint8_t *token, const uint8_t *frame, size_t len, void *out, uint8_t *nonce)
{
    return fu_box_open(token, "provider request", NULL, 0, frame + INVITE_HEADER, len - INVITE_HEADER, out, nonce);
}

void invite_seal_reply(const uint8_t *token, const uint8_t *nonce, const void *msg, size_t len, uint8_t *out)
{
    fu_box_seal(token, "provider reply", nonce, 24, msg, len, out, NULL);
}

int invite_open_reply(const uint8_t *token, const uint8_t *nonce, const uint8_t *box, size_t len, void *out)
{
    return fu_box_open(token, "provider reply", nonce, 24, box, len, out, NULL);
}
