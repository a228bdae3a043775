/* det_scenes.c — procedural detection scenes: images of a classification dataset (CIFAR-10,
 * Fashion-MNIST) pasted onto textured backgrounds, with exact boxes.
 *
 * Scene i is a pure function of (seed, i): every draw comes from the sequential generator of
 * stream SCENE_STREAM starting at counter i << 20 (background, then the objects), the pixel
 * noise from stream NOISE_STREAM at counters (i << 24) + block, so any scene can be rendered
 * alone, by any thread, in any order.
 *
 * Recipe (data/README.md, "Procedural scenes"):
 *   1. Background, one of four: a linear gradient between two colours; sine or square stripes
 *      (period 4..32 px, any angle); value-noise blobs (a 2..8-cell grid of random colours,
 *      smoothstep-interpolated); a crop of 1/4..3/4 of a pool image magnified to the scene (a
 *      blurry natural texture, no recognisable object). Then uniform noise of amplitude 0..12.
 *   2. k objects, k uniform in [min_objects, max_objects]: each a random pool image, side
 *      s = size * U[scale_min, scale_max], aspect a log-uniform in [1/aspect_max, aspect_max],
 *      w = round(s sqrt a), h = round(s / sqrt a). Objects are placed largest first (so small
 *      ones end on top), each up to 50 attempts at a random integer position that lets at most
 *      max_outside of a side leave the scene. An attempt is accepted when its clipped box has
 *      IoU < max_iou with every placed box and every placed object keeps at least min_visible
 *      of its box visible; an object with no accepted attempt is left out.
 *   3. Each object is resampled to w x h (antialiased bilinear, data/resample.c) and pasted;
 *      its box is the pasted rectangle clipped to the scene, in normalised coordinates.
 */
#include "data/det_scenes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/rng.h"

#define SCENE_STREAM (((uint64_t)0x5CE7E << 32) | MPX_RNG_TEST)
#define NOISE_STREAM (((uint64_t)0x5CE7F << 32) | MPX_RNG_TEST)

enum { ATTEMPTS = 50, BACKGROUND_KINDS = 4 };

struct mpx_scenes {
    mpx_scene_config cfg;
    const mpx_dataset *pool;
};

mpx_scene_config mpx_scene_config_default(mpx_split split, int64_t n) {
    mpx_scene_config c = {.size = 128,
                          .min_objects = 1,
                          .max_objects = 6,
                          .scale_min = 0.15f,
                          .scale_max = 0.6f,
                          .aspect_max = 2.0f,
                          .max_iou = 0.5f,
                          .min_visible = 0.5f,
                          .max_outside = 0.25f,
                          .n = n,
                          .seed = split == MPX_SPLIT_TRAIN ? 1 : 2};
    return c;
}

mpx_status mpx_scenes_create(const mpx_dataset *objects, const mpx_scene_config *c,
                             mpx_scenes **out) {
    *out = NULL;
    if (c->size < 8 || c->size > 4096)
        return mpx_fail(MPX_ERR_INPUT, "scenes: size %d (8..4096)", c->size);
    if (c->min_objects < 0 || c->max_objects < c->min_objects || c->max_objects > MPX_DET_MAX_BOXES)
        return mpx_fail(MPX_ERR_INPUT, "scenes: %d..%d objects per scene (0 <= min <= max <= %d)",
                        c->min_objects, c->max_objects, MPX_DET_MAX_BOXES);
    if (!(c->scale_min > 0) || !(c->scale_max >= c->scale_min) || !(c->scale_max <= 1) ||
        !(c->aspect_max >= 1) || !(c->aspect_max <= 16))
        return mpx_fail(MPX_ERR_INPUT,
                        "scenes: scale %g..%g (0 < min <= max <= 1), aspect_max %g (1..16)",
                        c->scale_min, c->scale_max, c->aspect_max);
    if (!(c->max_iou > 0) || !(c->max_iou <= 1) || !(c->min_visible >= 0) ||
        !(c->min_visible <= 1) || !(c->max_outside >= 0) || !(c->max_outside < 1))
        return mpx_fail(MPX_ERR_INPUT,
                        "scenes: max_iou %g (0, 1], min_visible %g [0, 1], max_outside %g [0, 1)",
                        c->max_iou, c->min_visible, c->max_outside);
    if (c->n < 1 || c->n > ((int64_t)1 << 39))
        return mpx_fail(MPX_ERR_INPUT, "scenes: n = %lld (1 .. 2^39)", (long long)c->n);
    if (objects->n < 1 || (objects->c != 1 && objects->c != 3))
        return mpx_fail(MPX_ERR_INPUT,
                        "scenes: the object pool has %lld images with %d channels (need >= 1 "
                        "image, 1 or 3 channels)",
                        (long long)objects->n, objects->c);
    MPX_TRY(mpx_dataset_validate(objects, "used as the scene object pool"));
    mpx_scenes *s = calloc(1, sizeof *s);
    if (!s) return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the scene generator");
    s->cfg = *c;
    s->pool = objects;
    *out = s;
    return MPX_OK;
}

void mpx_scenes_free(mpx_scenes *s) { free(s); }
const mpx_scene_config *mpx_scenes_config(const mpx_scenes *s) { return &s->cfg; }

void mpx_scene_scratch_free(mpx_scene_scratch *s) {
    free(s->owner);
    free(s->patch);
    mpx_resample_scratch_free(&s->rs);
    memset(s, 0, sizeof *s);
}

static int grow_scratch(mpx_scene_scratch *s, size_t owner, size_t patch) {
    if (owner > s->owner_cap) {
        uint8_t *p = realloc(s->owner, owner);
        if (!p) return 0;
        s->owner = p;
        s->owner_cap = owner;
    }
    if (patch > s->patch_cap) {
        float *p = realloc(s->patch, patch * sizeof *p);
        if (!p) return 0;
        s->patch = p;
        s->patch_cap = patch;
    }
    return 1;
}

static uint8_t to_byte(float v) {
    v += 0.5f;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void random_colour(mpx_rng *r, float c[3]) {
    for (int ch = 0; ch < 3; ch++) c[ch] = (float)(mpx_rng_u32(r) >> 24);
}

/* ---- backgrounds: image[S, S, 3] ---- */

static void gradient_or_stripes(int kind, mpx_rng *r, int S, uint8_t *img) {
    float c0[3], c1[3];
    random_colour(r, c0);
    random_colour(r, c1);
    double theta = 2 * M_PI * mpx_rng_uniform(r), ct = cos(theta), st = sin(theta);
    double period = 4 + 28 * mpx_rng_uniform(r), phase = mpx_rng_uniform(r);
    int square = (int)(mpx_rng_u32(r) >> 31);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            double u = (x + 0.5 - 0.5 * S) * ct + (y + 0.5 - 0.5 * S) * st, t;
            if (kind == 0) {
                t = fmin(1, fmax(0, 0.5 + u / S));
            } else {
                t = 0.5 + 0.5 * sin(2 * M_PI * (u / period + phase));
                if (square) t = t >= 0.5;
            }
            uint8_t *p = img + ((size_t)y * S + x) * 3;
            for (int ch = 0; ch < 3; ch++) p[ch] = to_byte((float)(c0[ch] + (c1[ch] - c0[ch]) * t));
        }
}

static void blobs(mpx_rng *r, int S, uint8_t *img) {
    enum { GMAX = 8 };
    int g = 2 + (int)mpx_rng_below(r, GMAX - 1); /* cells per side, 2..8 */
    float lattice[GMAX + 1][GMAX + 1][3];
    for (int i = 0; i <= g; i++)
        for (int j = 0; j <= g; j++) random_colour(r, lattice[i][j]);
    for (int y = 0; y < S; y++) {
        double fy = (y + 0.5) * g / S;
        int iy = (int)fy;
        double ty = fy - iy;
        ty = ty * ty * (3 - 2 * ty);
        for (int x = 0; x < S; x++) {
            double fx = (x + 0.5) * g / S;
            int ix = (int)fx;
            double tx = fx - ix;
            tx = tx * tx * (3 - 2 * tx);
            uint8_t *p = img + ((size_t)y * S + x) * 3;
            for (int ch = 0; ch < 3; ch++) {
                double top =
                    lattice[iy][ix][ch] + (lattice[iy][ix + 1][ch] - lattice[iy][ix][ch]) * tx;
                double bot = lattice[iy + 1][ix][ch] +
                             (lattice[iy + 1][ix + 1][ch] - lattice[iy + 1][ix][ch]) * tx;
                p[ch] = to_byte((float)(top + (bot - top) * ty));
            }
        }
    }
}

/* A crop of 1/4..3/4 of a pool image's side, magnified to the scene. */
static mpx_status magnified_crop(const mpx_scenes *s, mpx_rng *r, uint8_t *img,
                                 mpx_scene_scratch *scr) {
    const mpx_dataset *pool = s->pool;
    int S = s->cfg.size, c = pool->c;
    int64_t src =
        (int64_t)mpx_rng_below(r, (uint32_t)(pool->n < UINT32_MAX ? pool->n : UINT32_MAX));
    double side = fmin(pool->h, pool->w) * (0.25 + 0.5 * mpx_rng_uniform(r));
    double x0 = (pool->w - side) * mpx_rng_uniform(r), y0 = (pool->h - side) * mpx_rng_uniform(r);
    MPX_TRY(mpx_resample_box(mpx_dataset_image(pool, src), pool->h, pool->w, c, x0, y0, side, side,
                             scr->patch, S, S, 0, &scr->rs));
    for (size_t p = 0; p < (size_t)S * S; p++)
        for (int ch = 0; ch < 3; ch++)
            img[p * 3 + ch] = to_byte(scr->patch[p * c + (c == 3 ? ch : 0)]);
    return MPX_OK;
}

/* Uniform noise in [-a, a] per channel from NOISE_STREAM: one Philox block gives 16 bytes. */
static void add_noise(const mpx_scenes *s, int64_t index, float amplitude, uint8_t *img) {
    size_t n = (size_t)s->cfg.size * s->cfg.size * 3;
    for (size_t b = 0; b * 16 < n; b++) {
        uint32_t w[4];
        mpx_philox(s->cfg.seed, NOISE_STREAM, ((uint64_t)index << 24) + b, w);
        for (size_t k = 0; k < 16 && b * 16 + k < n; k++) {
            uint8_t byte = (uint8_t)(w[k / 4] >> (8 * (k % 4)));
            size_t i = b * 16 + k;
            img[i] = to_byte(img[i] + amplitude * (byte / 127.5f - 1));
        }
    }
}

/* ---- objects ---- */

typedef struct {
    int64_t src;
    int w, h;
} planned;

typedef struct {
    int x0, y0, x1, y1; /* clipped, half-open */
} rect;

static double rect_iou(rect a, rect b) {
    int iw = (a.x1 < b.x1 ? a.x1 : b.x1) - (a.x0 > b.x0 ? a.x0 : b.x0);
    int ih = (a.y1 < b.y1 ? a.y1 : b.y1) - (a.y0 > b.y0 ? a.y0 : b.y0);
    if (iw <= 0 || ih <= 0) return 0;
    double inter = (double)iw * ih;
    double ua = (double)(a.x1 - a.x0) * (a.y1 - a.y0) + (double)(b.x1 - b.x0) * (b.y1 - b.y0);
    return inter / (ua - inter);
}

/* Can `r` be pasted on top of the placed objects? IoU and visibility rules. */
static int fits(const mpx_scene_config *c, const rect *placed, const int64_t *visible, int k,
                rect r, const uint8_t *owner, int S) {
    int64_t covered[MPX_DET_MAX_BOXES] = {0};
    for (int j = 0; j < k; j++)
        if (rect_iou(placed[j], r) >= c->max_iou) return 0;
    for (int y = r.y0; y < r.y1; y++)
        for (int x = r.x0; x < r.x1; x++) {
            uint8_t o = owner[(size_t)y * S + x];
            if (o != 0xFF) covered[o]++;
        }
    for (int j = 0; j < k; j++) {
        double area = (double)(placed[j].x1 - placed[j].x0) * (placed[j].y1 - placed[j].y0);
        if (visible[j] - covered[j] < c->min_visible * area) return 0;
    }
    return 1;
}

/* Resample pool image `src` to w x h and paste the part inside the scene at (x, y). */
static mpx_status paste(const mpx_scenes *s, int64_t src, int x, int y, int w, int h, rect r,
                        uint8_t *img, mpx_scene_scratch *scr) {
    const mpx_dataset *pool = s->pool;
    int S = s->cfg.size, c = pool->c;
    MPX_TRY(mpx_resample_box(mpx_dataset_image(pool, src), pool->h, pool->w, c, 0, 0, pool->w,
                             pool->h, scr->patch, h, w, 0, &scr->rs));
    for (int yy = r.y0; yy < r.y1; yy++)
        for (int xx = r.x0; xx < r.x1; xx++) {
            const float *q = scr->patch + ((size_t)(yy - y) * w + (xx - x)) * c;
            uint8_t *p = img + ((size_t)yy * S + xx) * 3;
            for (int ch = 0; ch < 3; ch++) p[ch] = to_byte(q[c == 3 ? ch : 0]);
        }
    return MPX_OK;
}

static mpx_status place_objects(const mpx_scenes *s, mpx_rng *r, uint8_t *img, mpx_det_box *boxes,
                                int *count, mpx_scene_layout *layout, mpx_scene_scratch *scr) {
    const mpx_scene_config *c = &s->cfg;
    const mpx_dataset *pool = s->pool;
    int S = c->size;
    planned plan[MPX_DET_MAX_BOXES];
    int k = c->min_objects + (int)mpx_rng_below(r, (uint32_t)(c->max_objects - c->min_objects + 1));
    uint32_t pool_n = (uint32_t)(pool->n < UINT32_MAX ? pool->n : UINT32_MAX);
    double log_a = log(c->aspect_max);
    for (int j = 0; j < k; j++) {
        plan[j].src = mpx_rng_below(r, pool_n);
        double side = S * (c->scale_min + (c->scale_max - c->scale_min) * mpx_rng_uniform(r));
        double sa = exp(0.5 * log_a * (2 * mpx_rng_uniform(r) - 1)); /* sqrt(aspect) */
        plan[j].w = (int)fmin(S, fmax(1, lround(side * sa)));
        plan[j].h = (int)fmin(S, fmax(1, lround(side / sa)));
    }
    /* largest first (insertion sort: stable, so equal areas keep their draw order) */
    for (int j = 1; j < k; j++) {
        planned p = plan[j];
        int i = j;
        while (i > 0 && (int64_t)plan[i - 1].w * plan[i - 1].h < (int64_t)p.w * p.h) {
            plan[i] = plan[i - 1];
            i--;
        }
        plan[i] = p;
    }
    memset(scr->owner, 0xFF, (size_t)S * S);
    rect placed[MPX_DET_MAX_BOXES];
    int64_t visible[MPX_DET_MAX_BOXES];
    int n = 0;
    for (int j = 0; j < k; j++) {
        int w = plan[j].w, h = plan[j].h;
        int ox = (int)floor(c->max_outside * w), oy = (int)floor(c->max_outside * h);
        for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
            int x = -ox + (int)mpx_rng_below(r, (uint32_t)(S - w + 2 * ox + 1));
            int y = -oy + (int)mpx_rng_below(r, (uint32_t)(S - h + 2 * oy + 1));
            rect q = {x < 0 ? 0 : x, y < 0 ? 0 : y, x + w > S ? S : x + w, y + h > S ? S : y + h};
            if (!fits(c, placed, visible, n, q, scr->owner, S)) continue;
            for (int yy = q.y0; yy < q.y1; yy++)
                for (int xx = q.x0; xx < q.x1; xx++) {
                    uint8_t *o = &scr->owner[(size_t)yy * S + xx];
                    if (*o != 0xFF) visible[*o]--;
                    *o = (uint8_t)n;
                }
            MPX_TRY(paste(s, plan[j].src, x, y, w, h, q, img, scr));
            placed[n] = q;
            visible[n] = (int64_t)(q.x1 - q.x0) * (q.y1 - q.y0);
            int32_t label = pool->labels[plan[j].src];
            boxes[n] = (mpx_det_box){(float)q.x0 / S, (float)q.y0 / S, (float)q.x1 / S,
                                     (float)q.y1 / S, label,           0};
            if (layout) layout->objects[n] = (mpx_scene_object){plan[j].src, label, x, y, w, h};
            n++;
            break;
        }
    }
    *count = n;
    if (layout) layout->count = n;
    return MPX_OK;
}

mpx_status mpx_scenes_render_with(const mpx_scenes *s, int64_t index, uint8_t *image,
                                  mpx_det_box *boxes, int *count, mpx_scene_layout *layout,
                                  mpx_scene_scratch *scr) {
    const mpx_scene_config *c = &s->cfg;
    int S = c->size;
    *count = 0;
    if (index < 0 || index >= c->n)
        return mpx_fail(MPX_ERR_INPUT, "scene %lld is outside [0, %lld)", (long long)index,
                        (long long)c->n);
    /* patch: the magnified background [S, S, c] or an object [<= S, <= S, c] */
    if (!grow_scratch(scr, (size_t)S * S, (size_t)S * S * 3))
        return mpx_fail(MPX_ERR_NOMEM, "out of memory rendering a %dx%d scene", S, S);
    if (layout) memset(layout, 0, sizeof *layout);
    mpx_rng r = mpx_rng_make(c->seed, SCENE_STREAM, (uint64_t)index << 20);
    int kind = (int)mpx_rng_below(&r, BACKGROUND_KINDS);
    if (kind <= 1)
        gradient_or_stripes(kind, &r, S, image);
    else if (kind == 2)
        blobs(&r, S, image);
    else
        MPX_TRY(magnified_crop(s, &r, image, scr));
    add_noise(s, index, 12 * mpx_rng_uniform(&r), image);
    if (layout) layout->background = kind;
    return place_objects(s, &r, image, boxes, count, layout, scr);
}

mpx_status mpx_scenes_render(const mpx_scenes *s, int64_t index, uint8_t *image, mpx_det_box *boxes,
                             int *count, mpx_scene_layout *layout) {
    mpx_scene_scratch scr = {0};
    mpx_status st = mpx_scenes_render_with(s, index, image, boxes, count, layout, &scr);
    mpx_scene_scratch_free(&scr);
    return st;
}

mpx_status mpx_scenes_render_dataset(const mpx_scenes *s, mpx_det_dataset *out) {
    const mpx_scene_config *c = &s->cfg;
    const mpx_dataset *pool = s->pool;
    MPX_TRY(mpx_det_dataset_alloc(out, c->n, c->size, pool->num_classes,
                                  (const char *const *)pool->class_names));
    out->ids = calloc((size_t)c->n, sizeof *out->ids);
    if (!out->ids) {
        mpx_det_dataset_free(out);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for %lld scene ids", (long long)c->n);
    }
    mpx_status st = MPX_OK;
    int failed = 0;
    char msg[1024] = "";
#pragma omp parallel
    {
        mpx_scene_scratch scr = {0};
#pragma omp for schedule(dynamic, 16)
        for (int64_t i = 0; i < c->n; i++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            char id[32];
            snprintf(id, sizeof id, "scene-%lld", (long long)i);
            int count = 0;
            mpx_status e = (out->ids[i] = strdup(id))
                               ? MPX_OK
                               : mpx_fail(MPX_ERR_NOMEM, "out of memory for scene ids");
            if (e == MPX_OK)
                e = mpx_scenes_render_with(s, i, out->images + (size_t)i * c->size * c->size * 3,
                                           out->boxes + i * MPX_DET_MAX_BOXES, &count, NULL, &scr);
            out->counts[i] = count;
            if (e != MPX_OK) {
#pragma omp critical(mpx_scenes_render_error)
                if (!failed) {
                    snprintf(msg, sizeof msg, "%s", mpx_error_message());
                    st = e;
#pragma omp atomic write
                    failed = 1;
                }
            }
        }
        mpx_scene_scratch_free(&scr);
    }
    if (failed) {
        mpx_det_dataset_free(out);
        return mpx_fail(st, "%s", msg);
    }
    return MPX_OK;
}
