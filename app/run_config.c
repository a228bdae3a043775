/* run_config.c — the schema of every `mpx train` config key and its typed resolution.
 *
 * Defaults are the references' (docs/papers.md §3, §5): GradScaler's dynamic scaler, the ALS
 * paper's n_uf = 1e-3, scale_bound 16, accum_bound 1024. Contradictions (a knob for a method
 * that is not selected, fp32 with loss scaling, ...) are errors naming where the key was set.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/fsutil.h"
#include "mpx/run.h"
#include "mpx/runtime.h"

#define NR 1, 0 /* min > max: no range check */
const mpx_cfg_key mpx_run_schema[] = {
    /* [model] */
    {"model", "arch", MPX_CFG_ENUM, "resnet50",
     "resnet18|resnet34|resnet50|resnet101|resnet20|resnet56|resnet110|bert_tiny|bert_mini|"
     "bert_small|bert_base|ssd|vgg",
     NR, "network architecture (resnet*, vgg: classification, bert_*: masked LM, ssd: detection)"},
    {"model", "trunk", MPX_CFG_ENUM, "resnet18", "resnet18|resnet34|resnet50|vgg", NR,
     "ssd: the feature extractor"},
    {"model", "dropout", MPX_CFG_FLOAT, "0.1", NULL, 0, 0.9, "bert: hidden and attention dropout"},
    {"model", "stem", MPX_CFG_ENUM, "auto", "auto|imagenet|cifar", NR,
     "auto: the architecture's own; imagenet: 7x7/2 + max-pool; cifar: 3x3/1"},
    {"model", "width", MPX_CFG_FLOAT, "1.0", NULL, 0.01, 16,
     "width multiplier of every stage (resnet, vgg, ssd trunk)"},
    {"model", "num_classes", MPX_CFG_INT, "0", NULL, 0, 100000, "0: from the dataset"},
    {"model", "zero_init_residual", MPX_CFG_BOOL, "false", NULL, NR,
     "start each block's last batch-norm gamma at 0"},
    {"model", "batchnorm", MPX_CFG_BOOL, "true", NULL, NR,
     "vgg, ssd: batch-norm after every conv of the vgg trunk and the extra layers (false: conv "
     "with bias + ReLU, as the papers' VGG-16 SSDs)"},
    {"model", "l2norm", MPX_CFG_BOOL, "false", NULL, NR,
     "ssd: L2-normalise the first feature map for its heads, learned scale from 20 (SSD's conv4_3)"},
    {"model", "bn_eps", MPX_CFG_FLOAT, "1e-5", NULL, 1e-12, 1, "batch-norm epsilon"},
    {"model", "bn_momentum", MPX_CFG_FLOAT, "0.1", NULL, 0, 1, "batch-norm running-stat momentum"},
    /* [data] */
    {"data", "dataset", MPX_CFG_ENUM, "cifar10",
     "cifar10|fashion_mnist|imagefolder|synthetic|text|scenes|voc", NR,
     "training data (synthetic: seeded random images, for benchmarks only; text: a corpus for "
     "masked LM; scenes: procedural detection scenes; voc: a Pascal VOC layout)"},
    {"data", "seq_len", MPX_CFG_INT, "128", NULL, 8, 4096, "text: tokens per sequence"},
    {"data", "vocab_size", MPX_CFG_INT, "8192", NULL, 64, 1000000, "text: WordPiece vocabulary"},
    {"data", "mask_prob", MPX_CFG_FLOAT, "0.15", NULL, 0.01, 0.5, "text: fraction of tokens predicted"},
    {"data", "scenes_train", MPX_CFG_INT, "20000", NULL, 1, 1e9, "scenes: training scenes"},
    {"data", "scenes_eval", MPX_CFG_INT, "1000", NULL, 1, 1e9, "scenes: evaluation scenes"},
    {"data", "root", MPX_CFG_STRING, "", NULL, NR,
     "imagefolder: root with train/ and val/; voc: the dataset folder or archive; text: a "
     "corpus folder or .tar.gz (default: the shared corpus)"},
    {"data", "cache_dir", MPX_CFG_STRING, "", NULL, NR,
     "default: $MPX_CACHE_DIR, else data/cache in the source tree"},
    {"data", "shared_dir", MPX_CFG_STRING, "", NULL, NR,
     "default: $MPX_SHARED_DATA, else ../shared/data beside the source tree"},
    {"data", "resolution", MPX_CFG_INT, "0", NULL, 0, 4096, "input size; 0: the dataset's own"},
    {"data", "crop_pad", MPX_CFG_INT, "4", NULL, 0, 64, "random crop with this zero padding"},
    {"data", "flip", MPX_CFG_BOOL, "true", NULL, NR, "random horizontal flips"},
    {"data", "normalize", MPX_CFG_BOOL, "true", NULL, NR, "per-channel mean/std normalisation"},
    {"data", "train_subset", MPX_CFG_INT, "0", NULL, 0, 1e9, "use the first N training examples; 0: all"},
    {"data", "eval_subset", MPX_CFG_INT, "0", NULL, 0, 1e9, "evaluate on the first N; 0: all"},
    /* [train] */
    {"train", "steps", MPX_CFG_INT, "1000", NULL, 1, 1e12, "optimizer steps"},
    {"train", "batch_size", MPX_CFG_INT, "64", NULL, 1, 65536, "examples per step"},
    {"train", "optimizer", MPX_CFG_ENUM, "sgd", "sgd|adamw|lamb", NR, "optimizer on FP32 masters"},
    {"train", "lr", MPX_CFG_FLOAT, "0.1", NULL, 0, 1e3, "base learning rate"},
    {"train", "momentum", MPX_CFG_FLOAT, "0.9", NULL, 0, 1, "SGD momentum"},
    {"train", "nesterov", MPX_CFG_BOOL, "false", NULL, NR, "Nesterov momentum"},
    {"train", "weight_decay", MPX_CFG_FLOAT, "5e-4", NULL, 0, 1, "on weights, not biases or norms"},
    {"train", "beta1", MPX_CFG_FLOAT, "0.9", NULL, 0, 1, "AdamW/LAMB beta1"},
    {"train", "beta2", MPX_CFG_FLOAT, "0.999", NULL, 0, 1, "AdamW/LAMB beta2"},
    {"train", "eps", MPX_CFG_FLOAT, "1e-8", NULL, 0, 1, "AdamW/LAMB epsilon"},
    {"train", "lr_schedule", MPX_CFG_ENUM, "cosine", "constant|step|cosine|linear", NR,
     "after warm-up"},
    {"train", "warmup_steps", MPX_CFG_INT, "0", NULL, 0, 1e12, "linear warm-up steps"},
    {"train", "warmup_start", MPX_CFG_FLOAT, "0.1", NULL, 0, 1, "warm-up starts at this fraction of lr"},
    {"train", "final_lr_frac", MPX_CFG_FLOAT, "0", NULL, 0, 1, "cosine/linear: final lr / lr"},
    {"train", "milestones", MPX_CFG_STRING, "", NULL, NR, "step schedule: ascending steps, e.g. 500,750"},
    {"train", "gamma", MPX_CFG_FLOAT, "0.1", NULL, 0, 1, "step schedule: factor at each milestone"},
    {"train", "clip_norm", MPX_CFG_FLOAT, "0", NULL, 0, 1e9, "global gradient-norm clip; 0: off"},
    {"train", "seed", MPX_CFG_INT, "0", NULL, 0, 9.2e18, "initialisation, data order, augmentation"},
    {"train", "threads", MPX_CFG_INT, "0", NULL, 0, 1024, "CPU threads; 0: all cores"},
    {"train", "isa", MPX_CFG_ENUM, "native", "native|avx2", NR,
     "CPU vector paths: native (what the CPU has) or avx2, the reference path: our kernels and "
     "oneDNN capped at AVX2/FMA/F16C, which every host kind has, so that a config and seed give "
     "the same bits on each (with train.threads = 1)"},
    {"train", "device", MPX_CFG_ENUM, "cpu", "cpu|cuda", NR, "backend"},
    {"train", "sync_bn", MPX_CFG_BOOL, "false", NULL, NR,
     "mpirun: batch-norm statistics of the global batch (summed over the ranks in every pass; CPU) "
     "instead of each rank's slice (as PyTorch DDP)"},
    {"train", "fuse", MPX_CFG_BOOL, "true", NULL, NR,
     "fuse element-wise work: a ReLU after a batch-norm or residual add runs inside that op's "
     "forward (its output never stored), and an add input only the add reads takes the add's "
     "output gradient as its own (no copy); the same bits; false: every op on its own (the "
     "baseline)"},
    {"train", "eval_every", MPX_CFG_INT, "0", NULL, 0, 1e12, "evaluate every N steps; 0: at the end"},
    {"train", "eval_batches", MPX_CFG_INT, "0", NULL, 0, 1e12, "batches per evaluation; 0: all"},
    {"train", "checkpoint_every", MPX_CFG_INT, "0", NULL, 0, 1e12, "checkpoint every N steps; 0: off"},
    {"train", "init_from", MPX_CFG_STRING, "", NULL, NR,
     "start from another run's checkpoint: its weights whose names this model has (a pretrained "
     "trunk); the rest initialised as usual; ignored on --resume"},
    {"train", "inject_nonfinite", MPX_CFG_STRING, "", NULL, NR,
     "testing hook: at these steps (e.g. 5,6,7) the backward runs with the loss scale times 2^100, "
     "a loss spike that overflows every FP16 gradient (BF16 and FP32 have the range to absorb it)"},
    {"train", "inject_rank", MPX_CFG_INT, "-1", NULL, -1, 1e6,
     "testing hook: under mpirun only this rank injects (-1: every rank)"},
    {"train", "max_nonfinite", MPX_CFG_INT, "20", NULL, 1, 1e9,
     "stop after this many consecutive steps with a non-finite loss or gradient"},
    /* [precision] */
    {"precision", "mode", MPX_CFG_ENUM, "fp32", "fp32|fp16|bf16|tf32|fp8|fixed16", NR,
     "storage format policy (tf32: FP32 storage, convolution and GEMM operands rounded to TF32; "
     "fp8: bf16 storage, GEMM operands quantized to FP8 under precision.fp8_recipe; fixed16: "
     "FP32 storage, GEMM operands quantized to 16-bit fixed point under precision.rounding)"},
    {"precision", "fixed_frac", MPX_CFG_INT, "14", NULL, 0, 24,
     "fixed16: fraction bits f of Q(16, f) (values k 2^-f, |value| <= 2^(15-f); Gupta et al. "
     "2015 trained with f = 14)"},
    {"precision", "fp8_recipe", MPX_CFG_ENUM, "delayed", "delayed|current|mxfp8|als", NR,
     "fp8: per-tensor scales from an amax history (Transformer Engine's delayed scaling), from "
     "the tensor (current), 32-element E8M0 blocks (OCP MXFP8), or ALS's layer scales on the "
     "gradients (inputs and weights current)"},
    {"precision", "fp8_margin", MPX_CFG_INT, "0", NULL, 0, 32, "fp8: scale = max / amax / 2^margin"},
    {"precision", "fp8_history", MPX_CFG_INT, "1024", NULL, 1, 1024,
     "fp8 delayed: amax history length (TE's amax_history_len)"},
    {"precision", "fp8_amax", MPX_CFG_ENUM, "max", "max|most_recent", NR,
     "fp8 delayed: the history's largest amax or its newest (TE's amax_compute_algo)"},
    {"precision", "fp8_pow2", MPX_CFG_BOOL, "false", NULL, NR,
     "fp8: per-tensor scales rounded down to a power of two"},
    {"precision", "mx_rule", MPX_CFG_ENUM, "floor", "floor|ceil", NR,
     "mxfp8: block exponent floor(log2 amax) - emax (the OCP spec) or ceil(log2(amax / max)) "
     "(cuBLAS, Transformer Engine)"},
    {"precision", "rounding", MPX_CFG_ENUM, "rne", "rne|stochastic", NR, "storage casts"},
    {"precision", "tensor_cores", MPX_CFG_BOOL, "true", NULL, NR,
     "fp16/bf16/tf32 on a GPU: convolutions and GEMMs on tensor cores, exact on their operands "
     "(16-bit values, or tf32's rounded ones; FP32 accumulation); false: FP32 FMA math as in "
     "fp32 (no effect on the CPU)"},
    {"precision", "direct_io", MPX_CFG_BOOL, "true", NULL, NR,
     "fp16/bf16 on a GPU: operators read and write the 16-bit storage themselves; false: the "
     "executor decodes it into FP32 scratch and rounds results back, as on the CPU (the same "
     "bits; a speed baseline; no effect on the CPU)"},
    {"precision", "master_weights", MPX_CFG_BOOL, "true", NULL, NR,
     "fp16/bf16: FP32 master copies of the 16-bit parameters (the MPT recipe); false: the "
     "optimizer updates the stored weights, w <- round(w - lr u) under "
     "precision.update_rounding"},
    {"precision", "update_rounding", MPX_CFG_ENUM, "same", "same|rne|stochastic", NR,
     "the optimizer's roundings into the 16-bit format (weights without masters, state in "
     "storage); same: precision.rounding. rounding = rne with update_rounding = stochastic "
     "rounds only the update stochastically (Zamirai et al. 2020)"},
    {"precision", "optimizer_state", MPX_CFG_ENUM, "fp32", "fp32|storage", NR,
     "momentum and Adam moments in FP32, or rounded into the 16-bit format after each update"},
    {"precision", "scaling", MPX_CFG_ENUM, "none", "none|fixed|dynamic|adaptive|adaptive-quantile",
     NR, "loss-scaling method"},
    {"precision", "loss_scale", MPX_CFG_FLOAT, "1", NULL, 1e-30, 1e30,
     "fixed: the scale; adaptive: the scale at the loss"},
    {"precision", "init_scale", MPX_CFG_FLOAT, "65536", NULL, 1e-30, 1e30, "dynamic: initial scale"},
    {"precision", "growth_factor", MPX_CFG_FLOAT, "2", NULL, 1, 1e6, "dynamic"},
    {"precision", "backoff_factor", MPX_CFG_FLOAT, "0.5", NULL, 1e-6, 1, "dynamic"},
    {"precision", "growth_interval", MPX_CFG_INT, "2000", NULL, 1, 1e9,
     "dynamic: finite steps before growth"},
    {"precision", "hysteresis", MPX_CFG_INT, "1", NULL, 1, 1e6,
     "dynamic: back off on the N-th overflow since the last change"},
    {"precision", "min_scale", MPX_CFG_FLOAT, "0", NULL, 0, 1e30, "dynamic: floor; 0: none"},
    {"precision", "max_scale", MPX_CFG_FLOAT, "0", NULL, 0, 1e30, "dynamic: ceiling; 0: none"},
    {"precision", "als", MPX_CFG_ENUM, "mpx", "mpx|reference", NR,
     "adaptive: mpx's rules, or the 2019 ada-loss code in every point (u_max 6e4, merges tested "
     "on stored magnitudes and added in FP16, FP16 unscaling, factors every step, float32 "
     "power of two, factor applied to the FP16 gradient before the GEMM); fp16 only"},
    {"precision", "n_uf", MPX_CFG_FLOAT, "1e-3", NULL, 1e-12, 0.5, "adaptive: underflow fraction"},
    {"precision", "u_min", MPX_CFG_FLOAT, "6e-8", NULL, 1e-45, 1, "adaptive: smallest value kept"},
    {"precision", "u_max", MPX_CFG_FLOAT, "65504", NULL, 1, 1e38, "adaptive: overflow limit"},
    {"precision", "scale_bound", MPX_CFG_FLOAT, "16", NULL, 1, 1e30, "adaptive: max per-layer factor"},
    {"precision", "accum_bound", MPX_CFG_FLOAT, "1024", NULL, 1, 1e30,
     "adaptive: max cumulative scale"},
    {"precision", "update_every", MPX_CFG_INT, "100", NULL, 1, 1e9,
     "adaptive: recompute factors every N steps"},
    {"precision", "quantile", MPX_CFG_FLOAT, "0.01", NULL, 1e-9, 0.5,
     "adaptive-quantile: fraction allowed to underflow"},
    {"precision", "unscale_fp16", MPX_CFG_BOOL, "false", NULL, NR,
     "adaptive: unscale weight gradients in the storage format (the 2019 code) instead of FP32"},
    /* [log] */
    {"log", "stats_every", MPX_CFG_INT, "100", NULL, 0, 1e12, "per-layer statistics every N steps; 0: off"},
    {"log", "whatif", MPX_CFG_STRING, "", NULL, NR,
     "statistics steps also count every activation gradient as these recipes would cast it "
     "(comma-separated: fp16, bf16, e5m2, e5m2_current, e4m3_current, mxfp8_e5m2, mxfp4, nvfp4, "
     "or all; CPU)"},
    {"log", "log_every", MPX_CFG_INT, "50", NULL, 1, 1e12, "plain log line every N steps (no TTY)"},
    {"log", "progress", MPX_CFG_ENUM, "auto", "auto|always|never", NR, "progress line"},
};
#undef NR
const size_t mpx_run_schema_len = sizeof mpx_run_schema / sizeof *mpx_run_schema;

static mpx_status contradiction(const mpx_config *cfg, const char *key, const char *why) {
    return mpx_fail(MPX_ERR_INPUT, "%s: %s = %s: %s", mpx_cfg_where(cfg, key), key,
                    mpx_cfg_raw(cfg, key), why);
}

/* Set to something other than its default (a stored resolved config sets every key, at its
 * default where nobody chose otherwise: that is no contradiction). */
static int non_default(const mpx_config *cfg, const char *dotted) {
    if (!mpx_cfg_is_set(cfg, dotted)) return 0;
    const char *dot = strchr(dotted, '.');
    for (size_t i = 0; i < mpx_run_schema_len; i++) {
        const mpx_cfg_key *k = &mpx_run_schema[i];
        if (strncmp(k->section, dotted, (size_t)(dot - dotted)) != 0 || strcmp(k->key, dot + 1) != 0)
            continue;
        if (k->type == MPX_CFG_INT || k->type == MPX_CFG_FLOAT)
            return mpx_cfg_float(cfg, dotted) != strtod(k->def, NULL);
        if (k->type == MPX_CFG_BOOL) return mpx_cfg_bool(cfg, dotted) != (strcmp(k->def, "true") == 0);
        return strcmp(mpx_cfg_str(cfg, dotted), k->def) != 0;
    }
    return 1;
}

static mpx_status any_set(const mpx_config *cfg, const char *const *keys, const char *why) {
    for (; *keys; keys++)
        if (non_default(cfg, *keys)) {
            char k[64];
            snprintf(k, sizeof k, "%s", *keys);
            return mpx_fail(MPX_ERR_INPUT, "%s: %s is set but %s", mpx_cfg_where(cfg, k), k, why);
        }
    return MPX_OK;
}

static void copy_str(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src); }

/* Up to `cap` ascending positive step numbers separated by commas from string key `key`. */
static mpx_status parse_steps(const mpx_config *cfg, const char *key, int64_t *out, int cap) {
    const char *s = mpx_cfg_str(cfg, key);
    int n = 0;
    int64_t prev = -1;
    while (*s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v <= prev || n == cap) {
            char why[96];
            snprintf(why, sizeof why, "expected up to %d ascending step numbers separated by commas", cap);
            return contradiction(cfg, key, why);
        }
        out[n++] = prev = v;
        s = end;
        if (*s == ',') s++;
        else if (*s)
            return contradiction(cfg, key, "expected numbers separated by commas");
    }
    for (int i = n; i < cap; i++) out[i] = -1;
    return MPX_OK;
}

static mpx_status parse_milestones(const mpx_config *cfg, mpx_lr_schedule *lr) {
    int64_t m[8];
    MPX_TRY(parse_steps(cfg, "train.milestones", m, 8));
    for (int i = 0; i < 8; i++) {
        if (m[i] == 0) return contradiction(cfg, "train.milestones", "milestones are positive steps");
        lr->milestones[i] = m[i] > 0 ? m[i] : 0;
    }
    return MPX_OK;
}

/* precision.als = reference: the 2019 code's defaults where the config does not choose
 * otherwise (u_max 6e4, factors every step, weight gradients unscaled in FP16), written into the
 * config so that the resolved text a run file stores says so; and the code's setting: FP16,
 * adaptive, round to nearest. */
static mpx_status als_version(mpx_config *cfg, const mpx_run_cfg *rc, mpx_scaling_cfg *s) {
    s->als = (mpx_als_version)mpx_als_parse(mpx_cfg_str(cfg, "precision.als"));
    if (s->als != MPX_ALS_REFERENCE) return MPX_OK;
    if (s->method != MPX_SCALING_ADAPTIVE)
        return contradiction(cfg, "precision.als", "the reference is the 2019 code's adaptive "
                             "scaling (precision.scaling = adaptive)");
    if (rc->precision.mode != MPX_MODE_FP16 || rc->precision.rounding != MPX_ROUND_RNE)
        return contradiction(cfg, "precision.als", "the 2019 code trains in FP16 with round to "
                             "nearest (precision.mode = fp16, precision.rounding = rne)");
    static const char *const keys[3][2] = {
        {"u_max", "6e4"}, {"update_every", "1"}, {"unscale_fp16", "true"}};
    for (int i = 0; i < 3; i++) {
        char dotted[64];
        snprintf(dotted, sizeof dotted, "precision.%s", keys[i][0]);
        if (!mpx_cfg_is_set(cfg, dotted))
            MPX_TRY(mpx_config_set(cfg, "precision", keys[i][0], keys[i][1],
                                   "precision.als = reference"));
    }
    s->u_max = mpx_cfg_float(cfg, "precision.u_max");
    s->update_every = (int)mpx_cfg_int(cfg, "precision.update_every");
    return MPX_OK;
}

/* The model section: architecture, task and the family's own settings. */
static mpx_status model_from(mpx_config *cfg, mpx_run_cfg *rc) {
    mpx_model_cfg *m = &rc->model;
    copy_str(m->arch, sizeof m->arch, mpx_cfg_str(cfg, "model.arch"));
    const double wmult = mpx_cfg_float(cfg, "model.width");
    const int classes = (int)mpx_cfg_int(cfg, "model.num_classes");
    const float bn_eps = (float)mpx_cfg_float(cfg, "model.bn_eps"),
                bn_mom = (float)mpx_cfg_float(cfg, "model.bn_momentum");
    if (strncmp(m->arch, "bert_", 5) == 0) {
        m->task = MPX_TASK_MLM;
        if (mpx_bert_preset(m->arch, &m->bert) < 0)
            return contradiction(cfg, "model.arch", "unknown architecture");
        m->bert.dropout = (float)mpx_cfg_float(cfg, "model.dropout");
    } else if (strcmp(m->arch, "ssd") == 0) {
        m->task = MPX_TASK_DETECT;
        mpx_ssd_defaults(&m->ssd);
        copy_str(m->ssd.trunk, sizeof m->ssd.trunk, mpx_cfg_str(cfg, "model.trunk"));
        m->ssd.width_mult = wmult;
        m->ssd.num_classes = classes;
        m->ssd.bn_eps = bn_eps;
        m->ssd.batchnorm = mpx_cfg_bool(cfg, "model.batchnorm");
        m->ssd.l2norm = mpx_cfg_bool(cfg, "model.l2norm");
        if (!m->ssd.batchnorm && strcmp(m->ssd.trunk, "vgg") != 0)
            return contradiction(cfg, "model.batchnorm",
                                 "false needs model.trunk = vgg (the resnet trunks have batch-norm)");
        m->ssd.bn_momentum = bn_mom;
    } else if (strcmp(m->arch, "vgg") == 0) {
        m->task = MPX_TASK_CLASSIFY;
        m->vgg = (mpx_vgg_cfg){wmult, mpx_cfg_bool(cfg, "model.batchnorm"), bn_eps, bn_mom, classes};
    } else {
        m->task = MPX_TASK_CLASSIFY;
        if (mpx_resnet_preset(m->arch, &m->resnet) < 0)
            return contradiction(cfg, "model.arch", "unknown architecture");
        const char *stem = mpx_cfg_str(cfg, "model.stem");
        if (strcmp(stem, "imagenet") == 0) m->resnet.stem = MPX_STEM_IMAGENET;
        if (strcmp(stem, "cifar") == 0) m->resnet.stem = MPX_STEM_CIFAR;
        m->resnet.width_mult = wmult;
        m->resnet.num_classes = classes;
        m->resnet.zero_init_residual = mpx_cfg_bool(cfg, "model.zero_init_residual");
        m->resnet.bn_eps = bn_eps;
        m->resnet.bn_momentum = bn_mom;
    }
    return MPX_OK;
}

/* The data section, and whether the dataset fits the model's task. */
static mpx_status data_from(mpx_config *cfg, mpx_run_cfg *rc) {
    const mpx_model_cfg *m = &rc->model;
    mpx_data_cfg *d = &rc->data;
    copy_str(d->dataset, sizeof d->dataset, mpx_cfg_str(cfg, "data.dataset"));
    copy_str(d->root, sizeof d->root, mpx_cfg_str(cfg, "data.root"));
    copy_str(d->cache_dir, sizeof d->cache_dir, mpx_cfg_str(cfg, "data.cache_dir"));
    copy_str(d->shared_dir, sizeof d->shared_dir, mpx_cfg_str(cfg, "data.shared_dir"));
    if (!d->cache_dir[0]) snprintf(d->cache_dir, sizeof d->cache_dir, "%s", mpx_data_cache_dir());
    if (!d->shared_dir[0]) snprintf(d->shared_dir, sizeof d->shared_dir, "%s", mpx_data_shared_dir());
    d->resolution = (int)mpx_cfg_int(cfg, "data.resolution");
    d->crop_pad = (int)mpx_cfg_int(cfg, "data.crop_pad");
    d->flip = mpx_cfg_bool(cfg, "data.flip");
    d->normalize = mpx_cfg_bool(cfg, "data.normalize");
    d->train_subset = mpx_cfg_int(cfg, "data.train_subset");
    d->eval_subset = mpx_cfg_int(cfg, "data.eval_subset");
    d->seq_len = (int)mpx_cfg_int(cfg, "data.seq_len");
    d->vocab_size = (int)mpx_cfg_int(cfg, "data.vocab_size");
    d->mask_prob = mpx_cfg_float(cfg, "data.mask_prob");
    d->scenes_train = mpx_cfg_int(cfg, "data.scenes_train");
    d->scenes_eval = mpx_cfg_int(cfg, "data.scenes_eval");
    static const char *const why[3] = {
        "resnet models train on images (cifar10, fashion_mnist, imagefolder, synthetic)",
        "bert_* models train on data.dataset = text", "ssd trains on data.dataset = scenes or voc"};
    int data_task = strcmp(d->dataset, "text") == 0 ? MPX_TASK_MLM
                    : strcmp(d->dataset, "scenes") == 0 || strcmp(d->dataset, "voc") == 0 ? MPX_TASK_DETECT
                                                                                          : MPX_TASK_CLASSIFY;
    if (data_task != (int)m->task) return contradiction(cfg, "data.dataset", why[m->task]);
    if (m->task == MPX_TASK_MLM && d->seq_len > m->bert.max_len)
        return contradiction(cfg, "data.seq_len", "longer than the model's 512 positions");
    if (strcmp(d->dataset, "voc") == 0 && !d->root[0])
        return contradiction(cfg, "data.dataset", "voc needs data.root (a VOC folder or archive)");
    if (strcmp(d->dataset, "imagefolder") == 0 && !d->root[0])
        return contradiction(cfg, "data.dataset", "imagefolder needs data.root");
    if (strcmp(d->dataset, "imagefolder") == 0 && d->resolution == 0)
        return contradiction(cfg, "data.dataset", "imagefolder needs data.resolution (e.g. 224)");
    return MPX_OK;
}

/* The train section: schedule, optimizer, evaluation, checkpoints. */
static mpx_status train_from(mpx_config *cfg, mpx_run_cfg *rc) {
    mpx_train_cfg *t = &rc->train;
    t->steps = mpx_cfg_int(cfg, "train.steps");
    t->batch_size = (int)mpx_cfg_int(cfg, "train.batch_size");
    t->optim.kind = mpx_optimizer_parse(mpx_cfg_str(cfg, "train.optimizer"));
    t->optim.momentum = mpx_cfg_float(cfg, "train.momentum");
    t->optim.nesterov = mpx_cfg_bool(cfg, "train.nesterov");
    t->optim.weight_decay = mpx_cfg_float(cfg, "train.weight_decay");
    t->optim.beta1 = mpx_cfg_float(cfg, "train.beta1");
    t->optim.beta2 = mpx_cfg_float(cfg, "train.beta2");
    t->optim.eps = mpx_cfg_float(cfg, "train.eps");
    t->optim.clip_norm = mpx_cfg_float(cfg, "train.clip_norm");
    t->lr.kind = mpx_lr_parse(mpx_cfg_str(cfg, "train.lr_schedule"));
    t->lr.base_lr = mpx_cfg_float(cfg, "train.lr");
    t->lr.warmup_steps = mpx_cfg_int(cfg, "train.warmup_steps");
    t->lr.warmup_start = mpx_cfg_float(cfg, "train.warmup_start");
    t->lr.total_steps = t->steps;
    t->lr.final_lr_frac = mpx_cfg_float(cfg, "train.final_lr_frac");
    t->lr.step_gamma = mpx_cfg_float(cfg, "train.gamma");
    MPX_TRY(parse_milestones(cfg, &t->lr));
    MPX_TRY(parse_steps(cfg, "train.inject_nonfinite", t->inject_nonfinite, MPX_INJECT_MAX));
    if (t->lr.kind == MPX_LR_STEP && t->lr.milestones[0] == 0)
        return contradiction(cfg, "train.lr_schedule", "the step schedule needs train.milestones");
    if (t->lr.warmup_steps >= t->steps && t->lr.warmup_steps > 0)
        return contradiction(cfg, "train.warmup_steps", "warm-up must be shorter than train.steps");
    t->seed = (uint64_t)mpx_cfg_int(cfg, "train.seed");
    t->threads = (int)mpx_cfg_int(cfg, "train.threads");
    copy_str(t->isa, sizeof t->isa, mpx_cfg_str(cfg, "train.isa"));
    t->device = strcmp(mpx_cfg_str(cfg, "train.device"), "cuda") == 0 ? MPX_DEV_CUDA : MPX_DEV_CPU;
    t->fuse = mpx_cfg_bool(cfg, "train.fuse");
    t->sync_bn = mpx_cfg_bool(cfg, "train.sync_bn");
    t->eval_every = mpx_cfg_int(cfg, "train.eval_every");
    t->eval_batches = mpx_cfg_int(cfg, "train.eval_batches");
    t->checkpoint_every = mpx_cfg_int(cfg, "train.checkpoint_every");
    if (strlen(mpx_cfg_str(cfg, "train.init_from")) >= sizeof t->init_from)
        return contradiction(cfg, "train.init_from", "path too long");
    copy_str(t->init_from, sizeof t->init_from, mpx_cfg_str(cfg, "train.init_from"));
    t->max_nonfinite = (int)mpx_cfg_int(cfg, "train.max_nonfinite");
    t->inject_rank = (int)mpx_cfg_int(cfg, "train.inject_rank");
    t->ranks = 1;
    t->rank = 0;
    return MPX_OK;
}

/* log.whatif: the recipe names into a mask (stats.h: MPX_WHATIF_*). */
static mpx_status whatif_from(mpx_config *cfg, mpx_log_cfg *l) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", mpx_cfg_str(cfg, "log.whatif"));
    l->whatif = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int k = 0;
        if (strcmp(tok, "all") == 0) {
            l->whatif = (1u << MPX_WHATIF_N) - 1;
            continue;
        }
        while (k < MPX_WHATIF_N && strcmp(tok, mpx_whatif_names[k]) != 0) k++;
        if (k == MPX_WHATIF_N)
            return contradiction(cfg, "log.whatif",
                                 "unknown recipe (fp16, bf16, e5m2, e5m2_current, e4m3_current, "
                                 "mxfp8_e5m2, mxfp4, nvfp4, all)");
        l->whatif |= 1u << k;
    }
    return MPX_OK;
}

/* fp8 mode's recipe; its keys are refused in other modes. */
static mpx_status fp8_from(mpx_config *cfg, mpx_run_cfg *rc) {
    static const char *const keys[] = {"precision.fp8_recipe", "precision.fp8_margin",
                                       "precision.fp8_history", "precision.fp8_amax",
                                       "precision.fp8_pow2",   "precision.mx_rule", NULL};
    if (rc->precision.mode != MPX_MODE_FP8)
        return any_set(cfg, keys, "precision.mode is not fp8");
    mpx_fp8_cfg *f = &rc->precision.fp8;
    const char *r = mpx_cfg_str(cfg, "precision.fp8_recipe");
    f->recipe = strcmp(r, "current") == 0  ? MPX_FP8_CURRENT
                : strcmp(r, "mxfp8") == 0 ? MPX_FP8_MXFP8
                : strcmp(r, "als") == 0   ? MPX_FP8_ALS
                                          : MPX_FP8_DELAYED;
    f->margin = (int)mpx_cfg_int(cfg, "precision.fp8_margin");
    f->history = (int)mpx_cfg_int(cfg, "precision.fp8_history");
    f->most_recent = strcmp(mpx_cfg_str(cfg, "precision.fp8_amax"), "most_recent") == 0;
    f->pow2 = mpx_cfg_bool(cfg, "precision.fp8_pow2");
    f->mx_ceil = strcmp(mpx_cfg_str(cfg, "precision.mx_rule"), "ceil") == 0;
    return MPX_OK;
}

/* The precision section: the policy, master weights, the loss-scaling method and which of its
 * keys apply. */
static mpx_status precision_from(mpx_config *cfg, mpx_run_cfg *rc) {
    const mpx_train_cfg *t = &rc->train;
    if (mpx_precision_init(&rc->precision, mpx_cfg_str(cfg, "precision.mode"),
                           mpx_cfg_str(cfg, "precision.rounding"), t->seed) != 0)
        return contradiction(cfg, "precision.mode", "unknown mode or rounding");
    rc->precision.tensor_cores = mpx_cfg_bool(cfg, "precision.tensor_cores");
    MPX_TRY(fp8_from(cfg, rc));
    static const char *const fixed_keys[] = {"precision.fixed_frac", NULL};
    if (rc->precision.mode != MPX_MODE_FIXED16)
        MPX_TRY(any_set(cfg, fixed_keys, "precision.mode is not fixed16"));
    else
        rc->precision.fixed_frac = (int)mpx_cfg_int(cfg, "precision.fixed_frac");
    rc->precision.direct_io = mpx_cfg_bool(cfg, "precision.direct_io");
    const int masters = mpx_cfg_bool(cfg, "precision.master_weights");
    const int state16 = strcmp(mpx_cfg_str(cfg, "precision.optimizer_state"), "storage") == 0;
    if (mpx_precision_set_masters(&rc->precision, masters, state16) != 0)
        return contradiction(cfg, masters ? "precision.optimizer_state" : "precision.master_weights",
                             "needs precision.mode = fp16 or bf16 (fp32 and tf32 store FP32 "
                             "weights and state)");
    const char *upd = mpx_cfg_str(cfg, "precision.update_rounding");
    if (strcmp(upd, "same") != 0) {
        if (masters && !state16)
            return contradiction(cfg, "precision.update_rounding",
                                 "rounds only into 16-bit weights or state: needs "
                                 "precision.master_weights = false or optimizer_state = storage");
        rc->precision.update_rounding =
            strcmp(upd, "stochastic") == 0 ? MPX_ROUND_STOCHASTIC : MPX_ROUND_RNE;
    }
    mpx_scaling_cfg *s = &rc->scaling;
    mpx_scaling_defaults(s);
    s->method = mpx_scaling_parse(mpx_cfg_str(cfg, "precision.scaling"));
    s->loss_scale = mpx_cfg_float(cfg, "precision.loss_scale");
    s->init_scale = mpx_cfg_float(cfg, "precision.init_scale");
    s->growth_factor = mpx_cfg_float(cfg, "precision.growth_factor");
    s->backoff_factor = mpx_cfg_float(cfg, "precision.backoff_factor");
    s->growth_interval = (int)mpx_cfg_int(cfg, "precision.growth_interval");
    s->hysteresis = (int)mpx_cfg_int(cfg, "precision.hysteresis");
    s->min_scale = mpx_cfg_float(cfg, "precision.min_scale");
    s->max_scale = mpx_cfg_float(cfg, "precision.max_scale");
    s->n_uf = mpx_cfg_float(cfg, "precision.n_uf");
    s->u_min = mpx_cfg_float(cfg, "precision.u_min");
    s->u_max = mpx_cfg_float(cfg, "precision.u_max");
    s->scale_bound = mpx_cfg_float(cfg, "precision.scale_bound");
    s->accum_bound = mpx_cfg_float(cfg, "precision.accum_bound");
    s->update_every = (int)mpx_cfg_int(cfg, "precision.update_every");
    s->quantile = mpx_cfg_float(cfg, "precision.quantile");
    MPX_TRY(als_version(cfg, rc, s));
    s->unscale_fp16 = mpx_cfg_bool(cfg, "precision.unscale_fp16");

    static const char *const dynamic_keys[] = {
        "precision.init_scale", "precision.growth_factor", "precision.backoff_factor",
        "precision.growth_interval", "precision.hysteresis", "precision.min_scale",
        "precision.max_scale", NULL};
    static const char *const adaptive_keys[] = {
        "precision.n_uf", "precision.u_min", "precision.u_max", "precision.scale_bound",
        "precision.accum_bound", "precision.update_every", "precision.quantile",
        "precision.unscale_fp16", "precision.als", NULL};
    static const char *const loss_scale_key[] = {"precision.loss_scale", NULL};
    if (rc->precision.low == MPX_F32 && s->method != MPX_SCALING_NONE)
        return contradiction(cfg, "precision.scaling",
                             "loss scaling needs precision.mode = fp16 or bf16 (fp32 and tf32 "
                             "store FP32: nothing to scale)");
    if (s->method != MPX_SCALING_DYNAMIC)
        MPX_TRY(any_set(cfg, dynamic_keys, "precision.scaling is not dynamic"));
    if (!mpx_scaling_is_layerwise(s->method))
        MPX_TRY(any_set(cfg, adaptive_keys, "precision.scaling is not adaptive"));
    if (s->method == MPX_SCALING_NONE || s->method == MPX_SCALING_DYNAMIC)
        MPX_TRY(any_set(cfg, loss_scale_key, "precision.scaling is none or dynamic"));
    if (s->method == MPX_SCALING_FIXED && !mpx_cfg_is_set(cfg, "precision.loss_scale"))
        return contradiction(cfg, "precision.scaling", "fixed scaling needs precision.loss_scale");
    if (rc->precision.mode == MPX_MODE_FP8 && rc->precision.fp8.recipe == MPX_FP8_ALS &&
        !mpx_scaling_is_layerwise(s->method))
        return contradiction(cfg, "precision.fp8_recipe",
                             "als needs precision.scaling = adaptive (its layer scales are the "
                             "gradients' FP8 scales)");
    if (s->max_scale > 0 && s->min_scale > s->max_scale)
        return contradiction(cfg, "precision.min_scale", "exceeds precision.max_scale");
    return MPX_OK;
}

mpx_status mpx_run_cfg_from(mpx_config *cfg, mpx_run_cfg *rc) {
    MPX_TRY(mpx_config_validate(cfg, mpx_run_schema, mpx_run_schema_len));
    memset(rc, 0, sizeof *rc);
    MPX_TRY(model_from(cfg, rc));
    MPX_TRY(data_from(cfg, rc));
    MPX_TRY(train_from(cfg, rc));
    MPX_TRY(precision_from(cfg, rc));
    rc->log.stats_every = mpx_cfg_int(cfg, "log.stats_every");
    MPX_TRY(whatif_from(cfg, &rc->log));
    rc->log.log_every = mpx_cfg_int(cfg, "log.log_every");
    const char *prog = mpx_cfg_str(cfg, "log.progress");
    rc->log.progress = strcmp(prog, "always") == 0 ? 1 : strcmp(prog, "never") == 0 ? -1 : 0;
    return MPX_OK;
}

mpx_status mpx_run_load(const char *path, const char *const *overrides, int n_overrides,
                        mpx_config **cfg_out, mpx_run_cfg *rc) {
    *cfg_out = NULL;
    mpx_config *cfg;
    MPX_TRY(mpx_config_load(path, &cfg));
    *cfg_out = cfg;
    for (int i = 0; i < n_overrides; i++) MPX_TRY(mpx_config_override(cfg, overrides[i]));
    return mpx_run_cfg_from(cfg, rc);
}
