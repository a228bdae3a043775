/* cli.c — error reporting and small helpers shared by the subcommands. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cli_error(const char *cmd, mpx_status st) {
    fprintf(stderr, "mpx %s: %s\n", cmd, mpx_error_message());
    return st == MPX_ERR_INPUT ? EXIT_USAGE : EXIT_FAIL;
}

int cli_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "mpx %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see mpx %s --help)\n", cmd);
    return EXIT_USAGE;
}

void cli_getopt_start(void) {
    optind = 0; /* glibc: 0 re-initialises the scan (a fresh argv) */
    opterr = 0; /* the errors are ours: one line, naming the command */
}

int cli_getopt(const char *cmd, int argc, char **argv, const struct option *opts) {
    const int c = getopt_long(argc, argv, ":", opts, NULL);
    if (c == '?') {
        cli_usage(cmd, "unknown option '%s'", argv[optind - 1]);
        return CLI_BAD;
    }
    if (c == ':') {
        const char *a = argv[optind - 1];
        cli_usage(cmd, "%.*s needs a value", (int)strcspn(a, "="), a);
        return CLI_BAD;
    }
    return c;
}

int cli_overrides_only(const char *cmd, int n, char **args) {
    for (int i = 0; i < n; i++)
        if (!strchr(args[i], '=')) {
            cli_usage(cmd, "unexpected argument '%s' (overrides look like train.steps=100)", args[i]);
            return 0;
        }
    return 1;
}

int cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    return 0;
}
