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
/* Comma-separated names of the presets, for messages. */
const char *mpx_resnet_presets(void);

/* Builds input "image" [batch, h, w, c], "labels" [batch], the network, logits "fc" and the
 * loss "loss". Tensor ids of the image, labels and logits are returned through the pointers. */
mpx_status mpx_resnet_build(mpx_graph *g, const mpx_resnet_cfg *cfg, int batch, int h, int w, int c,
                            int *image, int *labels, int *logits);

#ifdef __cplusplus
}
#endif

#endif
