/* ssd.c — an SSD-style single-shot detector (Liu et al. 2016) on a ResNet or VGG-style trunk.
 *
 * Feature maps: the trunk's stride-8, -16 and -32 outputs, then extra blocks (1x1 conv to
 * half the channels, 3x3 stride-2 conv; batch-norm + ReLU after each) until a 1-pixel map or
 * six maps. With the VGG trunk, cfg.batchnorm = 0 drops every batch-norm (convs with bias, as
 * the papers' VGG-16 SSDs, whose unnormalised activation gradients are small), and cfg.l2norm
 * gives the first map's heads SSD's L2Norm (learned scale from 20). Each map gets a 3x3 class head and a 3x3 box head (default boxes per cell: 4, or
 * 6 with the 3 and 1/3 aspect ratios on maps 2-4, as SSD300). The heads' NHWC outputs,
 * flattened and concatenated map after map, are exactly the prior order of ssd.h (map, row,
 * column, box), so the MultiBox loss sees [B, P, C] and [B, P, 4].
 * The maps fan out (next stage and heads), so their gradients are branch merges, and every
 * conv is an adaptive-scaling layer: this is where the papers saw FP16 fail without scaling.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/models.h"
#include "mpx/ssd.h"

enum { MAX_MAPS = 6 };

void mpx_ssd_defaults(mpx_ssd_cfg *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->trunk, sizeof c->trunk, "resnet18");
    c->width_mult = 1.0;
    c->num_classes = 10;
    c->image_size = 128;
    c->s_min = 0.2f;
    c->s_max = 0.9f;
    c->iou_threshold = 0.5f;
    c->neg_per_pos = 3.0f;
    c->bn_eps = 1e-5f;
    c->bn_momentum = 0.1f;
    c->batchnorm = 1;
}

/* The trunk's and the extra layers' convolution rule (cfg.batchnorm), from vgg.c. */
static mpx_vgg_cfg vgg_of(const mpx_ssd_cfg *c) {
    return (mpx_vgg_cfg){c->width_mult, c->batchnorm, c->bn_eps, c->bn_momentum, 0};
}

mpx_status mpx_ssd_build(mpx_graph *g, const mpx_ssd_cfg *c, int batch, int max_boxes, int *image,
                         int *gt_boxes, int *gt_labels, int *conf, int *loc, int64_t *n_priors,
                         float *priors, int64_t priors_cap) {
    if (c->num_classes < 1 || c->image_size < 32 || !(c->width_mult > 0) || max_boxes < 1)
        return mpx_fail(MPX_ERR_INPUT, "ssd: bad configuration (classes %d, image %d, width %g)",
                        c->num_classes, c->image_size, c->width_mult);
    int64_t is[4] = {batch, c->image_size, c->image_size, 3}, bs[3] = {batch, max_boxes, 4},
            ls[2] = {batch, max_boxes};
    int x = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, is);
    int in_boxes = mpx_g_input(g, "gt_boxes", MPX_INPUT_F32, 3, bs);
    int in_labels = mpx_g_input(g, "gt_labels", MPX_INPUT_I32, 2, ls);

    int maps[MAX_MAPS], chans[MAX_MAPS], n_maps = 3;
    const mpx_vgg_cfg vc = vgg_of(c);
    if (strcmp(c->trunk, "vgg") == 0) {
        MPX_TRY(mpx_vgg_trunk(g, &vc, x, maps, chans));
    } else {
        mpx_resnet_cfg rc;
        if (mpx_resnet_preset(c->trunk, &rc) < 0 || rc.n_stages != 4)
            return mpx_fail(MPX_ERR_INPUT, "ssd: unknown trunk '%s' (resnet18, resnet34, resnet50, vgg)",
                            c->trunk);
        rc.stem = MPX_STEM_IMAGENET;
        rc.width_mult = c->width_mult;
        rc.bn_eps = c->bn_eps;
        rc.bn_momentum = c->bn_momentum;
        int taps[4], tch[4];
        MPX_TRY(mpx_resnet_trunk(g, &rc, x, taps, tch));
        for (int k = 0; k < 3; k++) {
            maps[k] = taps[k + 1];
            chans[k] = tch[k + 1];
        }
    }
    int64_t shape[4];
    mpx_graph_tensor_shape(g, maps[2], shape);
    /* The heads of the first map read it L2-normalised (the trunk went on from it as it is). */
    if (c->l2norm) maps[0] = mpx_g_l2norm(g, "l2norm", maps[0], 1e-10f, 20.0f);
    for (int64_t size = shape[1]; size > 1 && n_maps < MAX_MAPS; n_maps++) {
        char n[32];
        int k = mpx_vgg_width(&vc, 256);
        snprintf(n, sizeof n, "extra%d.reduce", n_maps - 2);
        int y = mpx_vgg_conv(g, &vc, n, maps[n_maps - 1], k / 2, 1, 1);
        snprintf(n, sizeof n, "extra%d.down", n_maps - 2);
        maps[n_maps] = mpx_vgg_conv(g, &vc, n, y, k, 3, 2);
        chans[n_maps] = k;
        mpx_graph_tensor_shape(g, maps[n_maps], shape);
        size = shape[1];
    }

    mpx_ssd_priors_cfg pc;
    memset(&pc, 0, sizeof pc);
    pc.n_maps = n_maps;
    pc.s_min = c->s_min;
    pc.s_max = c->s_max;
    pc.clip = 1;
    const int classes = c->num_classes + 1;
    int confs[MAX_MAPS], locs[MAX_MAPS];
    for (int m = 0; m < n_maps; m++) {
        mpx_graph_tensor_shape(g, maps[m], shape);
        if (shape[1] != shape[2])
            return mpx_fail(MPX_ERR_INPUT, "ssd: feature map %d is %lldx%lld, not square", m,
                            (long long)shape[1], (long long)shape[2]);
        pc.size[m] = (int)shape[1];
        pc.ratio3[m] = m >= 1 && m <= 3;
        int boxes = 4 + 2 * pc.ratio3[m];
        char n[32];
        snprintf(n, sizeof n, "head%d.conf", m);
        confs[m] = mpx_g_conv2d(g, n, maps[m], boxes * classes, 3, 3, 1, 1, 1);
        snprintf(n, sizeof n, "head%d.loc", m);
        locs[m] = mpx_g_conv2d(g, n, maps[m], boxes * 4, 3, 3, 1, 1, 1);
    }
    MPX_TRY(mpx_graph_status(g));
    int out_conf = mpx_g_concat(g, "conf", n_maps, confs, classes);
    int out_loc = mpx_g_concat(g, "loc", n_maps, locs, 4);

    int64_t P;
    MPX_TRY(mpx_ssd_prior_count(&pc, &P));
    float *pri = malloc((size_t)P * 4 * sizeof *pri);
    if (!pri) return mpx_fail(MPX_ERR_NOMEM, "out of memory for %lld default boxes", (long long)P);
    mpx_tensor pt = {MPX_F32, MPX_DEV_CPU, 2, {P, 4}, pri};
    mpx_status st = mpx_ssd_priors(&pc, &pt);
    if (st == MPX_OK)
        mpx_g_multibox(g, "loss", out_conf, out_loc, in_boxes, in_labels, pri, P, c->iou_threshold,
                       c->neg_per_pos);
    if (st == MPX_OK && priors && priors_cap >= P * 4) memcpy(priors, pri, (size_t)P * 4 * sizeof *pri);
    free(pri);
    MPX_TRY(st);
    if (image) *image = x;
    if (gt_boxes) *gt_boxes = in_boxes;
    if (gt_labels) *gt_labels = in_labels;
    if (conf) *conf = out_conf;
    if (loc) *loc = out_loc;
    if (n_priors) *n_priors = P;
    return mpx_graph_status(g);
}
