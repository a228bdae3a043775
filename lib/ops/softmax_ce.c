/* softmax_ce.c — softmax cross-entropy over the last dimension, FP32, with ignored labels.
 *
 * logits [M, K], labels I32 [M] (label < 0: row ignored), loss F32 [1] = mean over the counted
 * rows of -log softmax(logits)[label], probs [M, K] saved for backward. An ignored row's probs
 * are zeros, not computed: it has no loss and a zero gradient (BERT's masked LM ignores about
 * 85% of its rows, whose softmax over the vocabulary was most of the forward's time).
 * Each row subtracts its maximum before exp (no overflow) and takes its loss as
 * log(sum exp(x - max)) - (x[label] - max), never log(prob), so a vanishing probability still
 * gives a finite loss. The mean is deterministic: rows fall into NB fixed blocks (not one per
 * thread), each summed in row order, and the blocks are added in order.
 */
#include <math.h>
#include <string.h>

#include "mpx/ops.h"
#include "ops_internal.h"

enum { NB = 64 };

/* Validates labels against K (a label >= K names its row) and counts the non-ignored rows. */
static mpx_status count_labels(const char *op, const int32_t *lab, int64_t m, int64_t k,
                               int64_t *count) {
    int64_t n = 0;
    for (int64_t i = 0; i < m; i++) {
        if (lab[i] >= k)
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: labels[%lld] = %d is out of range: must be < K = %lld (dim 1 of "
                            "the logits) or < 0 to ignore the row",
                            op, (long long)i, (int)lab[i], (long long)k);
        n += lab[i] >= 0;
    }
    *count = n;
    return MPX_OK;
}

static mpx_status ce_shapes(const char *op, const char *xn, const mpx_tensor *x,
                            const mpx_tensor *labels, const char *yn, const mpx_tensor *y) {
    MPX_TRY(ops_expect(op, xn, x, MPX_F32, 2));
    MPX_TRY(ops_expect(op, "labels", labels, MPX_I32, 1));
    MPX_TRY(ops_expect_dim(op, "labels", labels, 0, x->shape[0], "M, the rows of the logits"));
    MPX_TRY(ops_expect(op, yn, y, MPX_F32, 2));
    return ops_expect_same_shape(op, xn, x, yn, y);
}

mpx_status mpx_softmax_ce_forward_cpu(const mpx_tensor *logits, const mpx_tensor *labels,
                                      mpx_tensor *loss, mpx_tensor *probs) {
    static const char *op = "softmax_ce forward";
    MPX_TRY(ce_shapes(op, "logits", logits, labels, "probs", probs));
    MPX_TRY(ops_expect(op, "loss", loss, MPX_F32, -1));
    if (mpx_tensor_numel(loss) != 1) {
        char buf[64];
        return mpx_fail(MPX_ERR_INPUT, "%s: loss has shape %s, expected one element", op,
                        mpx_shape_str(loss->ndim, loss->shape, buf, sizeof buf));
    }
    int64_t m = logits->shape[0], k = logits->shape[1], count = 0;
    const float *x = logits->data;
    const int32_t *lab = labels->data;
    float *p = probs->data;
    MPX_TRY(count_labels(op, lab, m, k, &count));

    double partial[NB];
#pragma omp parallel for schedule(static) if (m * k >= OPS_PAR_MIN)
    for (int b = 0; b < NB; b++) {
        double acc = 0;
        for (int64_t i = m * b / NB; i < m * (b + 1) / NB; i++) {
            const float *row = x + i * k;
            float *pr = p + i * k;
            if (lab[i] < 0) { /* no loss, no gradient: its probabilities are never read */
                memset(pr, 0, (size_t)k * sizeof *pr);
                continue;
            }
            float mx = row[0];
            for (int64_t j = 1; j < k; j++) mx = row[j] > mx ? row[j] : mx;
            double sum = 0;
            for (int64_t j = 0; j < k; j++) {
                pr[j] = expf(row[j] - mx);
                sum += pr[j];
            }
            float inv = (float)(1.0 / sum);
            for (int64_t j = 0; j < k; j++) pr[j] *= inv;
            acc += log(sum) - (double)(row[lab[i]] - mx);
        }
        partial[b] = acc;
    }
    double total = 0;
    for (int b = 0; b < NB; b++) total += partial[b];
    *(float *)loss->data = count ? (float)(total / (double)count) : 0.0f;
    return MPX_OK;
}

mpx_status mpx_softmax_ce_backward_cpu(const mpx_tensor *probs, const mpx_tensor *labels,
                                       mpx_tensor *dlogits) {
    static const char *op = "softmax_ce backward";
    MPX_TRY(ce_shapes(op, "probs", probs, labels, "dlogits", dlogits));
    int64_t m = probs->shape[0], k = probs->shape[1], count = 0;
    const float *p = probs->data;
    const int32_t *lab = labels->data;
    float *d = dlogits->data;
    MPX_TRY(count_labels(op, lab, m, k, &count));
    const float fc = (float)count;
#pragma omp parallel for schedule(static) if (m * k >= OPS_PAR_MIN)
    for (int64_t i = 0; i < m; i++) {
        float *dr = d + i * k;
        const float *pr = p + i * k;
        if (lab[i] < 0) {
            for (int64_t j = 0; j < k; j++) dr[j] = 0.0f;
            continue;
        }
        for (int64_t j = 0; j < k; j++) dr[j] = pr[j] / fc;
        dr[lab[i]] = (pr[lab[i]] - 1.0f) / fc;
    }
    return MPX_OK;
}
