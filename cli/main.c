/* main.c - `kite` entry point: dispatches to the subcommand in cli/<name>.c (table in commands.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "config/config.h"
#include "kite.h"

static void usage(FILE *f) {
    fprintf(f, "kite %s - LLM inference engine\n\nusage: kite COMMAND [options]\n\ncommands:\n", kite_version());
    for (size_t i = 0; i < cli_n_commands; i++)
        fprintf(f, "  %-10s %s\n", cli_commands[i].name, cli_commands[i].summary);
    fprintf(f, "\n'kite COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kite %s\n", kite_version());
        return 0;
    }
    for (size_t i = 0; i < cli_n_commands; i++)
        if (!strcmp(argv[1], cli_commands[i].name)) {
            (void)config_get(); /* the environment and tune table, handed to the kernels before any runs */
            if (cli_dist_init(&argc, &argv)) return 1; /* under mpirun: this rank joins the group */
            return cli_commands[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "kite: unknown command '%s' (see 'kite --help')\n", argv[1]);
    return 2;
}
