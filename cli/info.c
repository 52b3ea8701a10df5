/* info.c - placeholder while the subcommand is being written (replaced in this change series). */
#include <stdio.h>
#include "cli.h"
int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "kite info: not built yet\n");
    return 1;
}
