/* fuzz_config.c — libFuzzer target: the INI config parser and the run-config schema.
 * Any input must parse or fail with a status; never crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/config.h"
#include "mpx/run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    mpx_config *cfg = NULL;
    /* Includes resolve against a folder that holds none, so they fail like a missing file. */
    if (mpx_config_parse_string(text, "fuzz.cfg", "/nonexistent", &cfg) == MPX_OK) {
        mpx_run_cfg rc;
        (void)mpx_run_cfg_from(cfg, &rc);
    }
    mpx_config_free(cfg);
    free(text);
    return 0;
}
