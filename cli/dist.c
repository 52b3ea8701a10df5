/*
 * dist.c - the CLI's side of distributed inference (docs/distributed.md):
 * joining the process group mpirun started, and --split-mode.
 *
 * Every rank runs the same command line.  Rank 0 is the one users see: it
 * owns the tokenizer, the sampler and the output; the other ranks' stdout
 * goes to /dev/null (their errors still reach stderr, prefixed by rank).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "dist/dist.h"

/* mpirun (Open MPI, PMIx or Hydra) marks the processes it starts. */
static bool launched_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

int cli_dist_init(int *argc, char ***argv) {
    if (dist_init(argc, argv, launched_by_mpirun())) return -1;
    atexit(dist_finalize);
    if (dist_rank() > 0 && !freopen("/dev/null", "w", stdout)) return -1;
    return 0;
}

int cli_split_mode(const char *cmd, const char *mode, double timeout_s, kite_model_params *mp) {
    const int size = dist_size();
    if (!mode || !strcmp(mode, "none")) {
        if (size > 1)
            return cli_usage_error(cmd, "started as %d ranks (mpirun -np %d) without --split-mode: give "
                                        "--split-mode tensor, or run one process", size, size);
        return -1;
    }
    if (!strcmp(mode, "layer"))
        return cli_usage_error(cmd, "--split-mode layer (pipeline parallelism) is not implemented yet; use "
                                    "--split-mode tensor");
    if (strcmp(mode, "tensor"))
        return cli_usage_error(cmd, "--split-mode: '%s' is not one of none, tensor, layer", mode);
    if (size == 1 && !dist_available())
        fprintf(stderr, "kite %s: this build has no MPI (make MPI=1): --split-mode tensor runs as one process\n", cmd);
    mp->tp_size = size;
    mp->tp_rank = dist_rank();
    if (dist_set_timeout(timeout_s)) {
        fprintf(stderr, "kite %s: cannot start the --dist-timeout watchdog thread\n", cmd);
        return 1;
    }
    return -1;
}

uint64_t cli_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (uint64_t)ru.ru_maxrss * 1024; /* Linux: KiB */
}
