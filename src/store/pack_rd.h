/* Pack files kept open for readers (pack_rd.c). Internal header. */
#ifndef SQZ_STORE_PACK_RD_H
#define SQZ_STORE_PACK_RD_H

#include "daemon/fs.h"

int sqz_pack_rd_init(struct sqz_fs *fs);
void sqz_pack_rd_free(struct sqz_fs *fs);
/* A descriptor of the kept pack id (the caller's own: close it), or -1. */
int sqz_pack_rd_get(struct sqz_fs *fs, uint64_t id);
/* Keep fd (taken over) as pack id, replacing the oldest kept one. */
void sqz_pack_rd_put(struct sqz_fs *fs, uint64_t id, int fd);
/* Drop the kept descriptors of pack id (it was removed). */
void sqz_pack_rd_forget(struct sqz_fs *fs, uint64_t id);

#endif
