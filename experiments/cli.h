/* cli.h — shared pieces of the `mpx` subcommands: exit codes and error reporting. */
#ifndef MPX_CLI_H
#define MPX_CLI_H

#include "mpx/error.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_DIVERGED = 3 };

/* Print "mpx <cmd>: <message>" on stderr; returns the exit code for `st` (2 for bad input). */
int cli_error(const char *cmd, mpx_status st);
/* Print a usage error (one line) and the hint to use --help; returns 2. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 when argv holds -h or --help. */
int cli_wants_help(int argc, char **argv);
/* mkdir -p of the directory part of `path`. */
mpx_status cli_make_parent_dirs(const char *path);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);

#endif
