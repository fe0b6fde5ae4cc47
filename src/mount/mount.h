/* Entry point of the FUSE daemon, called by the CLI when argv is a mount
 * command line: squeezefs [-f] [-d] [-s] [-o OPT,...] BACKING MOUNTPOINT */
#ifndef SQZ_MOUNT_MAIN_H
#define SQZ_MOUNT_MAIN_H

#include <stdio.h>

/* Returns the process exit status (0 ok, 1 bad options / mount failed). */
int sqz_mount_main(int argc, char **argv);
/* Print the mount usage and options (for `squeezefs --help`). */
void sqz_mount_usage(FILE *out);

#endif
