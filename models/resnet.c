/* resnet.c — the ResNet family from one builder.
 *
 * ImageNet ResNets follow torchvision (ResNet v1.5: in a bottleneck the stride sits on the 3x3
 * convolution; a 1x1 conv + BN projection where the shortcut changes shape; fc with bias) so
 * parameter counts match (ResNet-50, 1000 classes: 25,557,032). Node names follow torchvision's
 * module names (layer3.2.conv1, layer1.0.downsample.0, fc). CIFAR ResNets (He et al. 2016,
 * §4.2) have a 3x3 stem of 16 channels and three stages of basic blocks (16, 32, 64); where the
 * shape changes we use a projection shortcut (option B) instead of zero-padding (option A).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mpx/models.h"

static const struct {
    const char *name;
    mpx_block_kind block;
    int n_stages, blocks[4], widths[4];
    mpx_stem_kind stem;
    int stem_width;
} g_presets[] = {
    {"resnet18", MPX_BLOCK_BASIC, 4, {2, 2, 2, 2}, {64, 128, 256, 512}, MPX_STEM_IMAGENET, 64},
    {"resnet34", MPX_BLOCK_BASIC, 4, {3, 4, 6, 3}, {64, 128, 256, 512}, MPX_STEM_IMAGENET, 64},
    {"resnet50", MPX_BLOCK_BOTTLENECK, 4, {3, 4, 6, 3}, {64, 128, 256, 512}, MPX_STEM_IMAGENET, 64},
    {"resnet101", MPX_BLOCK_BOTTLENECK, 4, {3, 4, 23, 3}, {64, 128, 256, 512}, MPX_STEM_IMAGENET, 64},
    {"resnet20", MPX_BLOCK_BASIC, 3, {3, 3, 3, 0}, {16, 32, 64, 0}, MPX_STEM_CIFAR, 16},
    {"resnet56", MPX_BLOCK_BASIC, 3, {9, 9, 9, 0}, {16, 32, 64, 0}, MPX_STEM_CIFAR, 16},
    {"resnet110", MPX_BLOCK_BASIC, 3, {18, 18, 18, 0}, {16, 32, 64, 0}, MPX_STEM_CIFAR, 16},
};
enum { N_PRESETS = sizeof g_presets / sizeof *g_presets };

int mpx_resnet_preset(const char *arch, mpx_resnet_cfg *cfg) {
    for (int i = 0; i < N_PRESETS; i++) {
        if (strcmp(arch, g_presets[i].name) != 0) continue;
        memset(cfg, 0, sizeof *cfg);
        cfg->arch = g_presets[i].name;
        cfg->block = g_presets[i].block;
        cfg->n_stages = g_presets[i].n_stages;
        memcpy(cfg->blocks, g_presets[i].blocks, sizeof cfg->blocks);
        memcpy(cfg->widths, g_presets[i].widths, sizeof cfg->widths);
        cfg->stem = g_presets[i].stem;
        cfg->stem_width = g_presets[i].stem_width;
        cfg->width_mult = 1.0;
        cfg->num_classes = 1000;
        cfg->bn_eps = 1e-5f;
        cfg->bn_momentum = 0.1f;
        return 0;
    }
    return -1;
}

static int scaled(int width, double mult) {
    int w = (int)lround(width * mult);
    return w < 1 ? 1 : w;
}

typedef struct {
    mpx_graph *g;
    const mpx_resnet_cfg *cfg;
    char name[MPX_NAME_MAX];
} builder;

static const char *nm(builder *b, const char *prefix, const char *suffix) {
    snprintf(b->name, sizeof b->name, "%s%s", prefix, suffix);
    return b->name;
}

/* conv -> bn (-> relu) */
static int conv_bn(builder *b, const char *prefix, const char *conv, const char *bn, int x, int k,
                   int ksize, int stride, int relu, const char *relu_name) {
    int y = mpx_g_conv2d(b->g, nm(b, prefix, conv), x, k, ksize, ksize, stride, ksize / 2, 0);
    y = mpx_g_batchnorm(b->g, nm(b, prefix, bn), y, b->cfg->bn_eps, b->cfg->bn_momentum, 1.0f);
    if (relu) y = mpx_g_relu(b->g, nm(b, prefix, relu_name), y);
    return y;
}

static int block(builder *b, const char *prefix, int x, int in_ch, int width, int stride) {
    const mpx_resnet_cfg *c = b->cfg;
    int expansion = c->block == MPX_BLOCK_BOTTLENECK ? 4 : 1;
    int out_ch = width * expansion, y;
    const char *last_bn;
    if (c->block == MPX_BLOCK_BOTTLENECK) {
        y = conv_bn(b, prefix, "conv1", "bn1", x, width, 1, 1, 1, "relu1");
        y = conv_bn(b, prefix, "conv2", "bn2", y, width, 3, stride, 1, "relu2");
        y = conv_bn(b, prefix, "conv3", "bn3", y, out_ch, 1, 1, 0, NULL);
        last_bn = "bn3";
    } else {
        y = conv_bn(b, prefix, "conv1", "bn1", x, width, 3, stride, 1, "relu1");
        y = conv_bn(b, prefix, "conv2", "bn2", y, out_ch, 3, 1, 0, NULL);
        last_bn = "bn2";
    }
    if (c->zero_init_residual) {
        char pname[MPX_NAME_MAX + 8];
        snprintf(pname, sizeof pname, "%s%s.gamma", prefix, last_bn);
        mpx_g_set_init(b->g, pname, (mpx_init){MPX_INIT_CONST, 0.0f});
    }
    int shortcut = x;
    if (stride != 1 || in_ch != out_ch)
        shortcut = conv_bn(b, prefix, "downsample.0", "downsample.1", x, out_ch, 1, stride, 0, NULL);
    y = mpx_g_add(b->g, nm(b, prefix, "add"), y, shortcut);
    return mpx_g_relu(b->g, nm(b, prefix, "relu3"), y);
}

mpx_status mpx_resnet_trunk(mpx_graph *g, const mpx_resnet_cfg *c, int x, int *taps, int *channels) {
    if (c->n_stages < 1 || c->n_stages > 4 || !(c->width_mult > 0))
        return mpx_fail(MPX_ERR_INPUT, "resnet: bad configuration (stages %d, width %g)",
                        c->n_stages, c->width_mult);
    builder b = {g, c, {0}};
    int stem = scaled(c->stem_width, c->width_mult);
    if (c->stem == MPX_STEM_IMAGENET) {
        x = conv_bn(&b, "", "conv1", "bn1", x, stem, 7, 2, 1, "relu");
        x = mpx_g_maxpool2d(g, "maxpool", x, 3, 2, 1);
    } else {
        x = conv_bn(&b, "", "conv1", "bn1", x, stem, 3, 1, 1, "relu");
    }
    int in_ch = stem, expansion = c->block == MPX_BLOCK_BOTTLENECK ? 4 : 1;
    for (int s = 0; s < c->n_stages; s++) {
        int width = scaled(c->widths[s], c->width_mult);
        for (int k = 0; k < c->blocks[s]; k++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d.", s + 1, k);
            x = block(&b, prefix, x, in_ch, width, k == 0 && s > 0 ? 2 : 1);
            in_ch = width * expansion;
        }
        if (taps) taps[s] = x;
        if (channels) channels[s] = in_ch;
    }
    return mpx_graph_status(g);
}

mpx_status mpx_resnet_build(mpx_graph *g, const mpx_resnet_cfg *c, int batch, int h, int w, int ch,
                            int *image, int *labels, int *logits) {
    if (c->num_classes < 1)
        return mpx_fail(MPX_ERR_INPUT, "resnet: %d classes", c->num_classes);
    int64_t ishape[4] = {batch, h, w, ch}, lshape[1] = {batch};
    int x = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, ishape);
    int y = mpx_g_input(g, "labels", MPX_INPUT_LABELS, 1, lshape);
    if (image) *image = x;
    if (labels) *labels = y;
    int taps[4];
    MPX_TRY(mpx_resnet_trunk(g, c, x, taps, NULL));
    x = mpx_g_avgpool_global(g, "avgpool", taps[c->n_stages - 1]);
    x = mpx_g_linear(g, "fc", x, c->num_classes, 1);
    if (logits) *logits = x;
    mpx_g_softmax_ce(g, "loss", x, y);
    return mpx_graph_status(g);
}
