/* cli.h — shared pieces of the `mpx` subcommands: exit codes and error reporting. */
#ifndef MPX_CLI_H
#define MPX_CLI_H

#include <getopt.h>
#include <stdio.h>

#include "mpx/error.h"
#include "mpx/precision.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_DIVERGED = 3, EXIT_INTERRUPTED = 4 };

/* Print "mpx <cmd>: <message>" on stderr; returns the exit code for `st` (2 for bad input). */
int cli_error(const char *cmd, mpx_status st);
/* Print a usage error (one line) and the hint to use --help; returns 2. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 when argv holds -h or --help. */
int cli_wants_help(int argc, char **argv);
/* The next option of `cmd`'s argv by getopt_long (--name VALUE and --name=VALUE alike; options
 * and positional arguments in any order): the option's `val`, optarg holding its value; -1 at
 * the end, when the positional arguments are argv[optind..argc); CLI_BAD after reporting an
 * unknown option or a missing value (cli_usage: the caller exits 2). Call with optind = 0
 * first: cli_getopt_start does. */
enum { CLI_BAD = -2 };
void cli_getopt_start(void);
int cli_getopt(const char *cmd, int argc, char **argv, const struct option *opts);
/* The positional arguments after the first must be config overrides (section.key=value): 1
 * when they are, else 0 after reporting the first that is not. */
int cli_overrides_only(const char *cmd, int n, char **args);

/* Which implementation each op family runs on the CPU backend in `mode`, in words (op_paths.c);
 * and that as a line "<indent><mode>: <paths>". */
const char *cli_op_path(mpx_precision_mode mode, int direct_io, char *buf, size_t cap);
void cli_print_op_paths(FILE *f, const char *indent, mpx_precision_mode mode, int direct_io);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);

#endif
