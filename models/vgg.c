/* vgg.c — the VGG-style trunk of the papers' SSDs, and a classifier on it to pretrain it.
 *
 * Five blocks of two 3x3 convolutions, each with batch-norm + ReLU or, with cfg.batchnorm 0,
 * with a bias + ReLU (VGG-16 as SSD300/512 use it), a 2x2 max-pool after each block. The SSD
 * (ssd.c) taps blocks 3-5; the classifier puts a global average pool and a linear layer on
 * block 5, so that a checkpoint of it starts an SSD's trunk by parameter name (train.init_from),
 * as the papers' SSDs start from an ImageNet-trained VGG-16.
 */
#include <stdio.h>

#include "mpx/models.h"

int mpx_vgg_conv(mpx_graph *g, const mpx_vgg_cfg *c, const char *name, int x, int k, int ksize,
                 int stride) {
    char n[MPX_NAME_MAX];
    snprintf(n, sizeof n, "%s.conv", name);
    x = mpx_g_conv2d(g, n, x, k, ksize, ksize, stride, ksize / 2, !c->batchnorm);
    if (c->batchnorm) {
        snprintf(n, sizeof n, "%s.bn", name);
        x = mpx_g_batchnorm(g, n, x, c->bn_eps, c->bn_momentum, 1.0f);
    }
    snprintf(n, sizeof n, "%s.relu", name);
    return mpx_g_relu(g, n, x);
}

int mpx_vgg_width(const mpx_vgg_cfg *c, int base) {
    int w = (int)(base * c->width_mult + 0.5);
    return w < 8 ? 8 : w;
}

mpx_status mpx_vgg_trunk(mpx_graph *g, const mpx_vgg_cfg *c, int x, int *taps, int *chans) {
    static const int widths[5] = {64, 128, 256, 512, 512};
    if (!(c->width_mult > 0))
        return mpx_fail(MPX_ERR_INPUT, "vgg: bad width multiplier %g", c->width_mult);
    for (int b = 0; b < 5; b++) {
        char n[32];
        for (int k = 0; k < 2; k++) {
            snprintf(n, sizeof n, "vgg.block%d.%d", b + 1, k + 1);
            x = mpx_vgg_conv(g, c, n, x, mpx_vgg_width(c, widths[b]), 3, 1);
        }
        snprintf(n, sizeof n, "vgg.pool%d", b + 1);
        x = mpx_g_maxpool2d(g, n, x, 2, 2, 0);
        if (b >= 2) {
            if (taps) taps[b - 2] = x;
            if (chans) chans[b - 2] = mpx_vgg_width(c, widths[b]);
        }
    }
    return mpx_graph_status(g);
}

mpx_status mpx_vgg_build(mpx_graph *g, const mpx_vgg_cfg *c, int batch, int h, int w, int ch,
                         int *image, int *labels, int *logits) {
    if (c->num_classes < 1) return mpx_fail(MPX_ERR_INPUT, "vgg: %d classes", c->num_classes);
    if (h < 32 || w < 32)
        return mpx_fail(MPX_ERR_INPUT, "vgg: %dx%d images; its five 2x2 pools need 32x32 or more", h, w);
    int64_t ishape[4] = {batch, h, w, ch}, lshape[1] = {batch};
    int x = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, ishape);
    int y = mpx_g_input(g, "labels", MPX_INPUT_LABELS, 1, lshape);
    if (image) *image = x;
    if (labels) *labels = y;
    int taps[3];
    MPX_TRY(mpx_vgg_trunk(g, c, x, taps, NULL));
    x = mpx_g_avgpool_global(g, "avgpool", taps[2]);
    x = mpx_g_linear(g, "fc", x, c->num_classes, 1);
    if (logits) *logits = x;
    mpx_g_softmax_ce(g, "loss", x, y);
    return mpx_graph_status(g);
}
