/* Packing small closed files, the packs kept open for readers and the
 * reclaiming of packs (pack_job.c, pack_rd.c, pack_gc.c; docs/FORMAT.md
 * "Packed files"). Internal header. */
#ifndef SQZ_PACK_PACKING_H
#define SQZ_PACK_PACKING_H

#include "node/inode.h"

/* ---- pack_job.c: packing small closed files (durable thread) ---- */
struct sqz_pack_cand;
int sqz_packer_init(struct sqz_fs *fs);
void sqz_packer_free(struct sqz_fs *fs);
void sqz_packer_stats(struct sqz_fs *fs, uint64_t *packed, uint64_t *failed);
/* 1 if a closed container c may be packed (cheap: options, length). */
int sqz_pack_worth(struct sqz_fs *fs, sqz_ctr *c);
/* 1 if the mount packs small files (so a new one may be stored as a
 * draft at its close: sqz_content_flush). */
int sqz_pack_drafts(struct sqz_fs *fs);
/* Durable thread, io exclusive, after c's durable mark: note in for
 * packing if it may be packed (an open reference until it is tried). */
void sqz_pack_note_locked(struct sqz_fs *fs, struct sqz_inode *in, sqz_ctr *c);
/* Durable thread: pack the oldest noted files, at most SQZ_PACK_SLICE of
 * them (takes each one's io in turn). Returns how many notes it took (0:
 * none left, or no memory: they stay). */
size_t sqz_pack_pending(struct sqz_fs *fs);
/* Durable thread: note again the drafts that were open when tried (once
 * per batch, so that one that stays open is not retried in a loop). */
void sqz_pack_retry(struct sqz_fs *fs);
/* Notes waiting (any thread). */
size_t sqz_pack_npending(struct sqz_fs *fs);
/* Notes from which the durable thread packs even during a stream of
 * closes (fs->pack_pending_max). */
size_t sqz_pack_pending_max(struct sqz_fs *fs);
/* Notes packed in one go: bounds the file data read into memory (at most
 * SQZ_PACK_SLICE * SQZ_PACK_MAX_LENGTH) and how long the durable thread
 * stays away from its queue of closed files. */
#define SQZ_PACK_SLICE 256
/* Bounds of fs->pack_pending_max: each note keeps an inode (and its file
 * descriptor) that the kernel may already have forgotten. */
#define SQZ_PACK_PENDING_MIN 4096
#define SQZ_PACK_PENDING_MAX 65536
/* Pack the candidates (takes each one's io in turn; no lock held). */
void sqz_pack_run(struct sqz_fs *fs, struct sqz_pack_cand **v, size_t n);
void sqz_pack_cand_free(struct sqz_pack_cand *x);
/* The id of the pack the packer appends to in directory dir (0: none);
 * forget it (it is about to be removed). Durable thread only. */
uint64_t sqz_packer_current(struct sqz_fs *fs, const struct stat *dir);
void sqz_packer_forget(struct sqz_fs *fs, const struct stat *dir);

/* ---- pack_gc.c: reclaiming the packs of removed files ---- */
int sqz_pack_gc_init(struct sqz_fs *fs);
void sqz_pack_gc_free(struct sqz_fs *fs);
/* A packed file's entry of directory dirfd (any fd of it) went: scan that
 * directory later. Takes the gc lock (a leaf). */
void sqz_pack_gc_note(struct sqz_fs *fs, int dirfd);
/* Around a rename or link through the mount, for each directory it
 * changes: reclaiming trusts no scan of a directory such an operation ran
 * in. */
void sqz_pack_gc_rename_begin(struct sqz_fs *fs, const struct sqz_inode *dir);
void sqz_pack_gc_rename_end(struct sqz_fs *fs, const struct sqz_inode *dir);
/* Durable thread: scan the noted directories that are due (all if
 * final). */
void sqz_pack_gc_run(struct sqz_fs *fs, int final);
void sqz_pack_gc_stats(struct sqz_fs *fs, uint64_t *removed, uint64_t *moved);

#endif
