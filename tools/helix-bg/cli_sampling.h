/* cli_sampling.h — the sampling flags generate and chat share (llama.cpp's
 * names), as rows of a cli_opt table filling an hx_sampler_params. */
#ifndef HX_CLI_SAMPLING_H
#define HX_CLI_SAMPLING_H

#include "cli_args.h"

#define CLI_SAMPLING_OPTS(sp)                                                                                        \
    {CLI_SECTION, NULL, NULL, NULL, "sampling (temp 0 = greedy; the chain: bias, penalties, top-k, top-p, min-p, temp):", \
     0, 0, NULL},                                                                                                     \
    {CLI_FLOAT, "--temp", &(sp).temp, "T", "temperature", 0, 100, NULL},                                             \
    {CLI_INT, "--top-k", &(sp).top_k, "K", "keep the K most likely tokens, 0 = off", 0, 1 << 30, NULL},              \
    {CLI_FLOAT, "--top-p", &(sp).top_p, "P", "nucleus: keep the most likely tokens up to P, 1 = off", 1e-6, 1, NULL}, \
    {CLI_FLOAT, "--min-p", &(sp).min_p, "P", "drop tokens below P times the best one's probability, 0 = off", 0, 1,   \
     NULL},                                                                                                           \
    {CLI_FLOAT, "--repeat-penalty", &(sp).repeat_penalty, "R", "penalize repeated tokens, 1 = off", 1e-6, 100, NULL}, \
    {CLI_INT, "--repeat-last-n", &(sp).penalty_last_n, "N", "tokens the penalties look back, -1 = all, 0 = off", -1,  \
     1 << 30, NULL},                                                                                                  \
    {CLI_FLOAT, "--frequency-penalty", &(sp).freq_penalty, "F", "frequency penalty, 0 = off", -100, 100, NULL},      \
    {CLI_FLOAT, "--presence-penalty", &(sp).presence_penalty, "P", "presence penalty, 0 = off", -100, 100, NULL},    \
    {CLI_U64, "--seed", &(sp).seed, "S", "random seed", 0, 0, NULL}

#endif
