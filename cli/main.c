/* main.c - `kite` entry point: dispatches to the subcommand in cli/<name>.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "config/config.h"
#include "kite.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"info", cmd_info, "print a GGUF file's metadata and tensor table"},
    {"convert", cmd_convert, "convert a llama2.c checkpoint (and tokenizer) to GGUF"},
    {"tokenize", cmd_tokenize, "print the token ids of a text as a JSON array"},
    {"synth", cmd_synth, "write a random-weight GGUF model of a real shape (for benchmarks)"},
    {"bench", cmd_bench, "measure prefill and decode speed (and the machine's bandwidth)"},
    {"tune", cmd_tune, "time the matmul variants for a model's shapes; write this machine's tune table"},
    {"roofline", cmd_roofline, "per-op roofline of prefill and decode: bounds, predicted speed, charts"},
    {"chat", cmd_chat, "chat with a model in the terminal (lines from standard input)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching and a chat page"},
    {"sot", cmd_sot, "answer with Skeleton-of-Thought: an outline, then every point expanded in parallel"},
    {"quantize", cmd_quantize, "quantize a GGUF model's weights (RTN; llama.cpp mixes such as q4_k_m)"},
    {"ppl", cmd_ppl, "perplexity on a text file; save log-probs, KL divergence against a saved base"},
    {"eval", cmd_eval, "multiple-choice tasks (JSON lines) scored by log-likelihood: acc, acc_norm"},
};

static void usage(FILE *f) {
    fprintf(f, "kite %s - LLM inference engine\n\nusage: kite COMMAND [options]\n\ncommands:\n", kite_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
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
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            (void)config_get(); /* the environment and tune table, handed to the kernels before any runs */
            return commands[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "kite: unknown command '%s' (see 'kite --help')\n", argv[1]);
    return 2;
}
