/*
 * commands.c - the table of `kite` subcommands (main.c dispatches on it) and
 * the list of every option table, which tests/unit/test_cli_opts.c walks.
 */
#include "cli.h"

const cli_command cli_commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"info", cmd_info, "print a GGUF file's metadata and tensor table"},
    {"convert", cmd_convert, "convert a llama2.c checkpoint or a Hugging Face directory (--hf) to GGUF"},
    {"tokenize", cmd_tokenize, "print the token ids of a text as a JSON array"},
    {"synth", cmd_synth, "write a random-weight GGUF model of a real shape (for benchmarks)"},
    {"bench", cmd_bench, "measure prefill and decode speed (and the machine's bandwidth)"},
    {"tune", cmd_tune, "time the matmul variants for a model's shapes; write this machine's tune table"},
    {"roofline", cmd_roofline, "per-op roofline of prefill and decode: bounds, predicted speed, charts"},
    {"chat", cmd_chat, "chat with a model in the terminal (lines from standard input)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching and a chat page"},
    {"sot", cmd_sot, "answer with Skeleton-of-Thought: an outline, then every point expanded in parallel"},
    {"quantize", cmd_quantize, "quantize a GGUF model (llama-quantize's types and form; RTN, GPTQ, AWQ, W8A8)"},
    {"imatrix", cmd_imatrix, "importance matrix of a model over a text (llama-imatrix's file format)"},
    {"ppl", cmd_ppl, "perplexity on a text file; save log-probs, KL divergence against a saved base"},
    {"batch", cmd_batch, "generate for many prompts (JSON lines) at once, B sequences per pass; temp 0 by default"},
    {"embed", cmd_embed, "embedding vectors of texts: pooled final hidden states, L2-normalised"},
    {"eval", cmd_eval, "multiple-choice tasks (JSON lines) scored by log-likelihood: acc, acc_norm"},
};
const size_t cli_n_commands = CLI_N(cli_commands);

const cli_spec *const cli_specs[] = {
    &cli_spec_run,      &cli_spec_info,        &cli_spec_convert,     &cli_spec_tokenize,  &cli_spec_synth,
    &cli_spec_bench,    &cli_spec_bench_lut,   &cli_spec_bench_serve, &cli_spec_bench_spec, &cli_spec_tune,
    &cli_spec_roofline, &cli_spec_chat,        &cli_spec_serve,       &cli_spec_sot,       &cli_spec_quantize,
    &cli_spec_quantize_w8, &cli_spec_ppl,      &cli_spec_eval,        &cli_spec_convert_hf, &cli_spec_bench_attn,
    &cli_spec_batch,    &cli_spec_embed,       &cli_spec_imatrix,
};
const size_t cli_n_specs = CLI_N(cli_specs);
