/* models.h — model builders: a typed description in, graph nodes out.
 *
 * Builders only append nodes to an mpx_graph (graph.h); the graph's sticky error carries any
 * failure, so a builder returns the graph's status at the end.
 */
#ifndef MPX_MODELS_H
#define MPX_MODELS_H

#include <stdint.h>

#include "mpx/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the ResNet family (one builder) ---- */
typedef enum { MPX_BLOCK_BASIC = 0, MPX_BLOCK_BOTTLENECK } mpx_block_kind;
typedef enum { MPX_STEM_IMAGENET = 0, MPX_STEM_CIFAR } mpx_stem_kind;

typedef struct {
    const char *arch;        /* "resnet50", ... (for messages and run files) */
    mpx_block_kind block;
    int n_stages;            /* 4 for ImageNet ResNets, 3 for the CIFAR ResNet-20/56/110 */
    int blocks[4];           /* blocks per stage */
    int widths[4];           /* base width of each stage (before expansion and multiplier) */
    mpx_stem_kind stem;
    int stem_width;          /* channels out of the stem */
    double width_mult;       /* multiplies every width (rounded, at least 1) */
    int num_classes;
    int zero_init_residual;  /* gamma of each block's last batch-norm starts at 0 */
    float bn_eps, bn_momentum;
} mpx_resnet_cfg;

/* Fill `cfg` for a named architecture: resnet18/34/50/101 (ImageNet stem, torchvision layout,
 * v1.5: stride on the 3x3), resnet20/56/110 (He et al. CIFAR, 3 stages 16/32/64, projection
 * shortcuts where the shape changes). Returns -1 for an unknown name. */
int mpx_resnet_preset(const char *arch, mpx_resnet_cfg *cfg);

/* The stem and stages of `cfg` on image tensor x: taps[s] and channels[s] receive stage s's
 * output tensor and width (either may be NULL). */
mpx_status mpx_resnet_trunk(mpx_graph *g, const mpx_resnet_cfg *cfg, int x, int *taps, int *channels);

/* Builds input "image" [batch, h, w, c], "labels" [batch], the network, logits "fc" and the
 * loss "loss". Tensor ids of the image, labels and logits are returned through the pointers. */
mpx_status mpx_resnet_build(mpx_graph *g, const mpx_resnet_cfg *cfg, int batch, int h, int w, int c,
                            int *image, int *labels, int *logits);

/* ---- VGG-style trunk: the papers' SSD feature extractor, and a classifier to pretrain it ---- */
typedef struct {
    double width_mult;       /* multiplies the widths 64, 128, 256, 512, 512 (at least 8) */
    int batchnorm;           /* batch-norm after each conv (1), or a conv with bias (0: VGG-16) */
    float bn_eps, bn_momentum;
    int num_classes;         /* the classifier's */
} mpx_vgg_cfg;

/* conv (k filters, ksize x ksize, stride) + batch-norm if cfg.batchnorm + ReLU, named
 * NAME.conv, NAME.bn, NAME.relu; returns the ReLU's tensor. */
int mpx_vgg_conv(mpx_graph *g, const mpx_vgg_cfg *cfg, const char *name, int x, int k, int ksize,
                 int stride);
/* base * width_mult, rounded, at least 8. */
int mpx_vgg_width(const mpx_vgg_cfg *cfg, int base);
/* Five blocks of two 3x3 convs (vgg.block<b>.<k>), a 2x2 max-pool after each: taps and chans
 * (either may be NULL) receive the pooled outputs of blocks 3, 4, 5 (strides 8, 16, 32). */
mpx_status mpx_vgg_trunk(mpx_graph *g, const mpx_vgg_cfg *cfg, int x, int *taps, int *chans);
/* Classifier: inputs "image" [batch, h, w, c] and "labels", the trunk, a global average pool,
 * logits "fc", loss "loss" (as mpx_resnet_build). */
mpx_status mpx_vgg_build(mpx_graph *g, const mpx_vgg_cfg *cfg, int batch, int h, int w, int c,
                         int *image, int *labels, int *logits);

/* ---- SSD-style single-shot detector ---- */
typedef struct {
    char trunk[16];          /* resnet18 | resnet34 | resnet50 | vgg */
    double width_mult;       /* of the trunk */
    int num_classes;         /* object classes; class 0 (background) is added */
    int image_size;          /* square input */
    float s_min, s_max;      /* default-box scales of the first and last map (0.2, 0.9) */
    float iou_threshold;     /* matching (0.5) */
    float neg_per_pos;       /* hard-negative mining ratio (3) */
    float bn_eps, bn_momentum;
    int batchnorm;           /* vgg trunk and extra layers: batch-norm after each conv (1), or
                              * a conv with bias and ReLU (0: the papers' VGG-16 SSDs) */
    int l2norm;              /* the first map's heads read it L2-normalised with a learned
                              * per-channel scale starting at 20 (SSD's conv4_3) */
} mpx_ssd_cfg;

/* Defaults above with a resnet18 trunk at width 1, 10 classes, 128 px. */
void mpx_ssd_defaults(mpx_ssd_cfg *cfg);
/* Inputs "image" [B,S,S,3], "gt_boxes" F32 [B,G,4] (corner form, normalised), "gt_labels"
 * I32 [B,G] (1..classes, -1 padding). The trunk's stride-8, -16 and -32 outputs and extra
 * stride-2 blocks down to 1 pixel (at most 6 maps) feed 3x3 class and box heads (4 default
 * boxes per cell; 6 on the 2nd-4th maps), concatenated in the prior order of ssd.h, into the
 * MultiBox loss. *n_priors receives P; conf/loc the [B,P,C] and [B,P,4] predictions; priors
 * (room for P * 4, may be NULL) the default boxes. */
mpx_status mpx_ssd_build(mpx_graph *g, const mpx_ssd_cfg *cfg, int batch, int max_boxes, int *image,
                         int *gt_boxes, int *gt_labels, int *conf, int *loc, int64_t *n_priors,
                         float *priors, int64_t priors_cap);

/* ---- BERT-style encoder for masked-language modelling ---- */
typedef struct {
    const char *arch;    /* "bert_tiny", ... */
    int layers, hidden, heads, ffn;
    int vocab, max_len;  /* token and position embedding sizes */
    int type_vocab;      /* segment (token type) embedding size: 2, as BERT */
    float dropout;       /* hidden and attention-probability dropout (BERT: 0.1) */
    float ln_eps;        /* 1e-12 as BERT */
    float init_std;      /* 0.02: every weight ~ N(0, std); biases 0; layer-norm gamma 1 */
} mpx_bert_cfg;

/* bert_tiny (L2/H128/A2), bert_mini (L4/H256/A4), bert_small (L4/H512/A8), bert_base
 * (L12/H768/A12); FFN 4H, vocabulary 8192, 512 positions. -1 for an unknown name. */
int mpx_bert_preset(const char *arch, mpx_bert_cfg *cfg);
/* The graph's inputs and outputs (tensor indices). */
typedef struct {
    int ids, positions, segments, mask, labels; /* inputs, all I32 [batch, seq_len] */
    int logits;                                 /* [batch, seq_len, vocab] */
} mpx_bert_io;

/* Inputs "ids", "positions", "segments" (token type, < type_vocab), "mask" (attention: 1 real,
 * 0 padding), "labels" (-1: not predicted); the sum of the token, position and segment
 * embeddings, layer-norm and dropout; post-LN encoder layers as in BERT; the MLM head (dense +
 * GELU + layer-norm, then a decoder tied to the token embedding, with a bias) and the
 * cross-entropy over predicted positions. */
mpx_status mpx_bert_build(mpx_graph *g, const mpx_bert_cfg *cfg, int batch, int seq_len,
                          mpx_bert_io *io);

#ifdef __cplusplus
}
#endif

#endif
