/* file_hash.h: the XXH3-64 of a file's bytes, the checksum of every
 * checkpoint part: written by the device that saved it (runtime/main.c),
 * listed in the step's COMPLETE by the broker, checked again by the broker
 * when it fetches a part from a remote host (tools/broker_remote.c) and by
 * every resume (runtime/checkpoint.c). */
#ifndef FUSION_RT_FILE_HASH_H
#define FUSION_RT_FILE_HASH_H

#include <stdint.h>

/* 0, or -1 (errno set). */
int file_xxh3(const char *path, uint64_t *hash);

#endif
