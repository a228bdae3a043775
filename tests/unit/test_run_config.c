/* test_run_config.c — how the precision keys of the master-weights ablation and of the 2019
 * reference ALS resolve (run_config.c), on config texts:
 *   - precision.master_weights / optimizer_state reach the precision policy, which then puts
 *     the masters and the optimizer state in the working format; fp32/tf32 refuse them;
 *   - precision.update_rounding follows precision.rounding unless set, and is refused where
 *     the optimizer rounds nothing into 16 bits (FP32 masters and state);
 *   - precision.als = reference brings the 2019 code's defaults where the config is silent
 *     (points a, d, e: u_max 6e4, weight gradients unscaled in FP16, factors every step), keeps
 *     what the config sets, writes them into the resolved text a run file stores (so that the
 *     text resolves to the same run again), and is refused outside adaptive FP16 with RNE.
 */
#include <stdlib.h>
#include <string.h>

#include "mpx/config.h"
#include "mpx/run.h"
#include "testutil.h"

/* Resolve `text` (a [model]/[data] preamble of a ResNet on CIFAR-10 is added); returns the
 * status and fills rc; *resolved (when not NULL) gets the resolved text, to be freed. */
static mpx_status resolve(const char *text, mpx_run_cfg *rc, char **resolved) {
    char buf[2048];
    snprintf(buf, sizeof buf, "[model]\narch = resnet20\n[data]\ndataset = cifar10\n%s", text);
    mpx_config *cfg = NULL;
    mpx_status st = mpx_config_parse_string(buf, "test.cfg", ".", &cfg);
    if (st == MPX_OK) st = mpx_run_cfg_from(cfg, rc);
    if (resolved) *resolved = st == MPX_OK ? mpx_config_resolved_text(cfg) : NULL;
    mpx_config_free(cfg);
    return st;
}

static void test_master_weights(void) {
    mpx_run_cfg rc;
    CHECK_OK(resolve("[precision]\nmode = fp16\n", &rc, NULL));
    CHECK(rc.precision.master_weights == 1 && rc.precision.state_in_storage == 0, "defaults");
    CHECK(mpx_precision_dtype(&rc.precision, MPX_ROLE_MASTER) == MPX_F32 &&
              mpx_precision_dtype(&rc.precision, MPX_ROLE_OPT_STATE) == MPX_F32,
          "the MPT recipe keeps masters and state in FP32");
    CHECK_OK(resolve("[precision]\nmode = bf16\nmaster_weights = false\n", &rc, NULL));
    CHECK(mpx_precision_dtype(&rc.precision, MPX_ROLE_MASTER) == MPX_BF16 &&
              mpx_precision_dtype(&rc.precision, MPX_ROLE_OPT_STATE) == MPX_F32,
          "bf16 without masters: masters %d state %d",
          (int)mpx_precision_dtype(&rc.precision, MPX_ROLE_MASTER),
          (int)mpx_precision_dtype(&rc.precision, MPX_ROLE_OPT_STATE));
    CHECK_OK(resolve("[precision]\nmode = fp16\nmaster_weights = false\noptimizer_state = storage\n",
                     &rc, NULL));
    CHECK(mpx_precision_dtype(&rc.precision, MPX_ROLE_MASTER) == MPX_F16 &&
              mpx_precision_dtype(&rc.precision, MPX_ROLE_OPT_STATE) == MPX_F16,
          "fp16 with masters and state in storage");
    CHECK(mpx_precision_dtype(&rc.precision, MPX_ROLE_UNSCALED_GRAD) == MPX_F32,
          "unscaled gradients stay FP32");
    CHECK(resolve("[precision]\nmode = fp32\nmaster_weights = false\n", &rc, NULL) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "precision.master_weights"),
          "fp32 without masters must be refused naming the key: %s", mpx_error_message());
    CHECK(resolve("[precision]\nmode = tf32\noptimizer_state = storage\n", &rc, NULL) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "precision.optimizer_state"),
          "tf32 state in storage must be refused naming the key: %s", mpx_error_message());
    CHECK_OK(resolve("[precision]\nmode = bf16\nmaster_weights = false\n", &rc, NULL));
    CHECK(rc.precision.update_rounding == MPX_ROUND_RNE, "update rounding follows rounding");
    CHECK_OK(resolve("[precision]\nmode = bf16\nrounding = stochastic\nmaster_weights = false\n",
                     &rc, NULL));
    CHECK(rc.precision.update_rounding == MPX_ROUND_STOCHASTIC, "update rounding follows rounding");
    CHECK_OK(resolve("[precision]\nmode = bf16\nmaster_weights = false\nupdate_rounding = stochastic\n",
                     &rc, NULL));
    CHECK(rc.precision.rounding == MPX_ROUND_RNE &&
              rc.precision.update_rounding == MPX_ROUND_STOCHASTIC,
          "rne storage casts with stochastic updates: %d %d", (int)rc.precision.rounding,
          (int)rc.precision.update_rounding);
    CHECK(resolve("[precision]\nmode = bf16\nupdate_rounding = stochastic\n", &rc, NULL) ==
                  MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "precision.update_rounding"),
          "update rounding with FP32 masters and state must be refused naming the key: %s",
          mpx_error_message());
}

static void test_als_reference_defaults(void) {
    mpx_run_cfg rc;
    char *text = NULL;
    CHECK_OK(resolve("[precision]\nmode = fp16\nscaling = adaptive\n", &rc, NULL));
    CHECK(rc.scaling.als == MPX_ALS_MPX && rc.scaling.u_max == 65504 && rc.scaling.update_every == 100 &&
              rc.scaling.unscale_fp16 == 0,
          "mpx defaults: u_max %g every %d fp16 unscale %d", rc.scaling.u_max, rc.scaling.update_every,
          rc.scaling.unscale_fp16);
    CHECK_OK(resolve("[precision]\nmode = fp16\nscaling = adaptive\nals = reference\n", &rc, &text));
    CHECK(rc.scaling.als == MPX_ALS_REFERENCE, "als not resolved");
    /* (a) ada_loss.py get_u_max('float16') = 6e4; (d) get_unscaled_gradient divides in FP16;
     * (e) AdaLoss(update_per_n_iteration=1) */
    CHECK(rc.scaling.u_max == 6e4, "(a) u_max %g", rc.scaling.u_max);
    CHECK(rc.scaling.unscale_fp16 == 1, "(d) FP16 unscale %d", rc.scaling.unscale_fp16);
    CHECK(rc.scaling.update_every == 1, "(e) update_every %d", rc.scaling.update_every);
    /* The resolved text says so, and resolves to the same run. */
    REQUIRE_VOID(text, "no resolved text");
    CHECK(strstr(text, "u_max = 6e4  ; precision.als = reference") &&
              strstr(text, "update_every = 1  ; precision.als = reference"),
          "resolved text:\n%s", text);
    mpx_config *again = NULL;
    mpx_run_cfg rc2;
    CHECK_OK(mpx_config_parse_string(text, "resolved", ".", &again));
    if (again) CHECK_OK(mpx_run_cfg_from(again, &rc2));
    CHECK(rc2.scaling.u_max == 6e4 && rc2.scaling.update_every == 1 && rc2.scaling.unscale_fp16 == 1 &&
              rc2.scaling.als == MPX_ALS_REFERENCE,
          "resolved text does not resolve to the same run");
    mpx_config_free(again);
    free(text);
    /* What the config sets wins (the papers' presets: every 1000, bounds 128 / 4096). */
    CHECK_OK(resolve("[precision]\nmode = fp16\nscaling = adaptive\nals = reference\n"
                     "update_every = 1000\nscale_bound = 128\naccum_bound = 4096\nu_max = 65504\n",
                     &rc, NULL));
    CHECK(rc.scaling.update_every == 1000 && rc.scaling.scale_bound == 128 &&
              rc.scaling.accum_bound == 4096 && rc.scaling.u_max == 65504,
          "explicit settings not kept");
}

static void test_als_reference_refusals(void) {
    mpx_run_cfg rc;
    static const char *const bad[] = {
        "[precision]\nmode = bf16\nscaling = adaptive\nals = reference\n",
        "[precision]\nmode = fp16\nrounding = stochastic\nscaling = adaptive\nals = reference\n",
        "[precision]\nmode = fp16\nscaling = adaptive-quantile\nals = reference\n",
        "[precision]\nmode = fp16\nscaling = dynamic\nals = reference\n",
        "[precision]\nmode = fp16\nscaling = adaptive\nals = 2019\n",
    };
    for (int i = 0; i < 5; i++) {
        mpx_status st = resolve(bad[i], &rc, NULL);
        const char *key = i == 4 ? "[precision] als = 2019" : "precision.als";
        CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), key),
              "case %d must be refused naming %s: %s", i, key, mpx_error_message());
    }
}

int main(void) {
    test_master_weights();
    test_als_reference_defaults();
    test_als_reference_refusals();
    return mpx_test_done(__FILE__);
}
