/* graph_compile.c — from a built graph to a runnable one.
 *
 * Resolves storage dtypes through the precision policy, decides which tensors need gradients,
 * attaches statistics observers, plans every buffer into arenas (gradients and fan-out branch
 * buffers share memory by lifetime), allocates through the backend and initialises parameters.
 * Also the inspection functions (memory plan, FLOPs, layers) and mpx_graph_free.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "mpx/arena.h"
#include "mpx/rng.h"

enum { ALIGN = 64 };

static size_t align_up(size_t v) { return (v + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* FP32 host values of a parameter's initialiser; counter-based so that each parameter's values
 * depend only on (seed, its name), not on what else the model contains. */
static void init_values(const mpx_param *p, uint64_t seed, float *host) {
    uint64_t stream = MPX_RNG_INIT ^ (fnv1a(p->name) << 8);
    for (int64_t i = 0; i < p->numel; i++) {
        switch (p->init.kind) {
        case MPX_INIT_CONST: host[i] = p->init.a; break;
        case MPX_INIT_NORMAL: host[i] = p->init.a * mpx_rand_normal(seed, stream, (uint64_t)i); break;
        case MPX_INIT_UNIFORM:
            host[i] = p->init.a * (2.0f * mpx_rand_uniform(seed, stream, (uint64_t)i) - 1.0f);
            break;
        }
    }
}

/* Per-node FP32 scratch need (floats): decoded inputs, output, parameters and every gradient
 * view of one forward or backward call, with per-take alignment slack. Conservative. An FP16
 * conv/linear layer may also hold its gradient times its factor (graph_exec.c:
 * factor_into_dy, als = reference). */
static int64_t node_scratch(const mpx_graph *g, const gnode *n) {
    int64_t f = 2 * g->tensors[n->out].numel + 16;
    if (n->is_gemm_layer && g->prec.low == MPX_F16) f += g->tensors[n->out].numel + 16;
    for (int i = 0; i < n->n_in; i++) f += 2 * g->tensors[n->in[i]].numel + 32;
    for (int i = 0; i < n->n_param; i++) f += 3 * g->params[n->param[i]].numel + 48;
    if (g->whatif) { /* what-if counts of the gradients it writes or merges (graph_whatif.c) */
        f += 2 * g->tensors[n->out].numel + 16;
        for (int i = 0; i < n->n_in; i++) f += 2 * g->tensors[n->in[i]].numel + 16;
    }
    if (mpx_precision_quantizes_operands(&g->prec) && op_is_gemm_family(n->op)) {
        /* fp8, fixed16: each operand quantized into FP32 scratch (graph_fp8.c, graph_fixed.c);
         * block formats read the output gradient twice, through a transpose (gemm_k) */
        int64_t ops = g->tensors[n->out].numel + 16;
        for (int i = 0; i < n->n_in; i++) ops += g->tensors[n->in[i]].numel + 16;
        for (int i = 0; i < n->n_param; i++) ops += g->params[n->param[i]].numel + 16;
        f += (mpx_precision_blocks_operands(&g->prec) ? 3 : 2) * ops;
    }
    return f;
}

static mpx_status alloc_arena(mpx_graph *g, void **arena, size_t bytes, const char *what) {
    *arena = g->be->alloc(g->be, bytes ? bytes : ALIGN);
    if (!*arena)
        return mpx_fail(MPX_ERR_NOMEM, "cannot allocate %zu MiB for %s on %s", bytes >> 20, what,
                        g->be->name);
    return MPX_OK;
}

/* ---- the memory plan: one list of buffer specs ----
 * Every buffer a step touches is one spec: its bytes, its arena, its lifetime where the arena
 * shares memory by lifetime (gradients and fan-out branch buffers, in backward time
 * t = nn - 1 - node index: written by the first consumer's backward, read by the producer's
 * backward), and where its address goes. Planning sets the offsets (in list order for the
 * whole-step arenas), allocation the addresses: one list, so the two cannot disagree. */
enum { AR_VALUES, AR_SAVED, AR_GRADS, AR_BRANCHES, AR_PARAMS, AR_COUNT };

typedef struct {
    int arena;
    mpx_arena_block b; /* size, lifetime (AR_GRADS, AR_BRANCHES), offset once planned */
    void **dst;        /* where the buffer's address goes */
} buf_spec;

typedef struct {
    buf_spec *v;
    int n, cap;
} spec_list;

static void add_spec(spec_list *l, int arena, size_t bytes, int first, int last, void *dst) {
    if (l->n < l->cap) l->v[l->n++] = (buf_spec){arena, {bytes, first, last, 0}, (void **)dst};
}

/* The backward time span of tensor t's gradient: from its last consumer's backward (the first
 * to write it) to its producer's, which reads it. A ReLU fused into the batch-norm before it
 * may leave its backward to that batch-norm's (graph_exec.c: relu_bwd_fused), which then reads
 * this gradient while it writes its own input's: the span runs through the batch-norm's
 * backward too, so the two never share memory. */
static void grad_span(const mpx_graph *g, const gtensor *t, int *first, int *last) {
    const int nn = g->n_nodes;
    int last_consumer = 0;
    for (int c = 0; c < t->n_consumers; c++)
        if (t->consumers[c] > last_consumer) last_consumer = t->consumers[c];
    int reader = t->producer;
    const gnode *pr = &g->nodes[reader];
    if (pr->op == OP_RELU && pr->plan.fused_into >= 0 &&
        g->nodes[pr->plan.fused_into].op == OP_BATCHNORM)
        reader = pr->plan.fused_into;
    *last = nn - 1 - reader;
    *first = nn - 1 - last_consumer;
}

/* Gradients (a shared one lives in its root's block, which lives as long as the group; with
 * keep_grads every one lives through the pass), branch buffers of fan-outs and FP32 shadows. */
static void grad_specs(mpx_graph *g, spec_list *l) {
    const int nn = g->n_nodes;
    int *block = malloc((size_t)g->n_tensors * sizeof *block); /* tensor -> its spec, or -1 */
    if (!block) {
        l->cap = 0; /* reported as out of memory by the caller */
        return;
    }
    for (int i = 0; i < g->n_tensors; i++) {
        gtensor *t = &g->tensors[i];
        block[i] = -1;
        if (!t->requires_grad || t->n_consumers == 0) continue;
        int first, last;
        grad_span(g, t, &first, &last);
        block[i] = l->n;
        /* a fan-out gradient is only materialised at its producer's backward (the merge) */
        const int gfirst = g->keep_grads ? 0 : t->n_consumers > 1 ? last : first;
        add_spec(l, AR_GRADS, (size_t)t->numel * mpx_dtype_size(t->plan.grad_dtype), gfirst,
                 g->keep_grads ? nn : last, &t->plan.grad);
        if (t->n_consumers > 1)
            for (int c = 0; c < t->n_consumers; c++)
                add_spec(l, AR_BRANCHES, (size_t)t->numel * sizeof(float), nn - 1 - t->consumers[c],
                         last, &t->plan.branch[c]);
        if (t->plan.needs_shadow)
            add_spec(l, AR_BRANCHES, (size_t)t->numel * sizeof(float), gfirst, last,
                     &t->plan.shadow);
    }
    for (int i = 0; i < g->n_tensors && l->cap; i++) {
        const int r = g->tensors[i].plan.grad_root;
        if (r == i || block[i] < 0 || block[r] < 0) continue;
        buf_spec *own = &l->v[block[i]], *root = &l->v[block[r]];
        if (own->b.first < root->b.first) root->b.first = own->b.first;
        if (own->b.last > root->b.last) root->b.last = own->b.last;
        own->b.size = 0;
        own->dst = NULL; /* its address is the root's (plan_addresses) */
    }
    free(block);
}

/* Every buffer of the step, in the order the whole-step arenas are packed. */
static mpx_status collect_specs(mpx_graph *g, spec_list *l) {
    int n = g->n_buffers + 3 * g->n_params; /* a value, a gradient, branches and a shadow each */
    for (int i = 0; i < g->n_tensors; i++) n += 3 + g->tensors[i].n_consumers;
    for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].plan.n_aux;
    l->v = calloc((size_t)n + 1, sizeof *l->v);
    l->n = 0;
    l->cap = l->v ? n + 1 : 0;
    for (int i = 0; i < g->n_tensors && l->cap; i++) { /* an elided value takes no memory */
        gtensor *t = &g->tensors[i];
        t->plan.value = NULL;
        if (!t->plan.elided)
            add_spec(l, AR_VALUES, (size_t)t->numel * mpx_dtype_size(t->plan.dtype), 0, 0,
                     &t->plan.value);
    }
    for (int i = 0; i < g->n_nodes && l->cap; i++)
        for (int a = 0; a < g->nodes[i].plan.n_aux; a++)
            add_spec(l, AR_SAVED,
                     (size_t)g->nodes[i].plan.aux_numel[a] *
                         mpx_dtype_size(g->nodes[i].plan.aux_dtype[a]),
                     0, 0, &g->nodes[i].plan.aux[a]);
    for (int i = 0; i < g->n_buffers && l->cap; i++)
        add_spec(l, AR_SAVED, (size_t)g->buffers[i].numel * sizeof(float), 0, 0,
                 &g->buffers[i].data);
    if (l->cap) grad_specs(g, l);
    for (int i = 0; i < g->n_params && l->cap; i++) { /* master, grad, and a low-precision copy */
        mpx_param *q = &g->params[i];
        add_spec(l, AR_PARAMS, (size_t)q->numel * sizeof(float), 0, 0, &q->master);
        add_spec(l, AR_PARAMS, (size_t)q->numel * sizeof(float), 0, 0, &q->grad);
        q->work = NULL;
        if (q->work_dtype != MPX_F32)
            add_spec(l, AR_PARAMS, (size_t)q->numel * mpx_dtype_size(q->work_dtype), 0, 0,
                     &q->work);
    }
    if (!l->cap || l->n >= l->cap) {
        free(l->v);
        l->v = NULL;
        return mpx_fail(MPX_ERR_NOMEM, "out of memory planning the graph");
    }
    return MPX_OK;
}

/* Offsets: packed in list order in the whole-step arenas, by lifetime in the others (the
 * specs of one arena gathered, planned, and written back). Returns each arena's bytes. */
static mpx_status plan_offsets(spec_list *l, size_t bytes[AR_COUNT]) {
    mpx_arena_block *blocks = calloc((size_t)l->n + 1, sizeof *blocks);
    if (!blocks) return mpx_fail(MPX_ERR_NOMEM, "out of memory planning the graph");
    for (int a = 0; a < AR_COUNT; a++) {
        const int shared = a == AR_GRADS || a == AR_BRANCHES;
        int k = 0;
        bytes[a] = 0;
        for (int i = 0; i < l->n; i++) {
            if (l->v[i].arena != a) continue;
            if (!shared) {
                l->v[i].b.offset = bytes[a];
                bytes[a] += align_up(l->v[i].b.size);
            }
            blocks[k++] = l->v[i].b;
        }
        if (!shared) continue;
        bytes[a] = mpx_arena_plan(blocks, k, ALIGN);
        k = 0;
        for (int i = 0; i < l->n; i++)
            if (l->v[i].arena == a) l->v[i].b.offset = blocks[k++].offset;
    }
    free(blocks);
    return MPX_OK;
}

/* Every spec's address; a shared gradient takes its root's, an FP32 parameter's working copy is
 * its master. */
static void plan_addresses(mpx_graph *g, const spec_list *l, void *const base[AR_COUNT]) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i].dst) *l->v[i].dst = (char *)base[l->v[i].arena] + l->v[i].b.offset;
    for (int i = 0; i < g->n_tensors; i++) {
        gtensor *t = &g->tensors[i];
        if (t->plan.grad_root != i && g->tensors[t->plan.grad_root].plan.grad)
            t->plan.grad = g->tensors[t->plan.grad_root].plan.grad;
    }
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].work_dtype == MPX_F32) g->params[i].work = g->params[i].master;
}

static mpx_status plan_and_allocate(mpx_graph *g) {
    mpx_memory_plan *pl = &g->plan;
    memset(pl, 0, sizeof *pl);
    spec_list l;
    MPX_TRY(collect_specs(g, &l));
    size_t bytes[AR_COUNT];
    mpx_status st = plan_offsets(&l, bytes);
    pl->values = bytes[AR_VALUES];
    pl->saved = bytes[AR_SAVED];
    pl->grads = bytes[AR_GRADS];
    pl->branches = bytes[AR_BRANCHES];
    pl->params = bytes[AR_PARAMS];
    int64_t scratch = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        int64_t s = node_scratch(g, &g->nodes[i]);
        if (s > scratch) scratch = s;
    }
    g->scratch_floats = (size_t)scratch;
    pl->scratch = align_up(g->scratch_floats * sizeof(float));
    pl->total = pl->values + pl->grads + pl->branches + pl->scratch + pl->params + pl->saved;

    if (st == MPX_OK) st = alloc_arena(g, &g->arena_values, pl->values, "activations");
    if (st == MPX_OK) st = alloc_arena(g, &g->arena_grads, pl->grads, "gradients");
    if (st == MPX_OK) st = alloc_arena(g, &g->arena_branches, pl->branches, "branch gradients");
    if (st == MPX_OK) st = alloc_arena(g, (void **)&g->scratch, pl->scratch, "scratch");
    if (st == MPX_OK) st = alloc_arena(g, &g->arena_params, pl->params, "parameters");
    if (st == MPX_OK) st = alloc_arena(g, &g->arena_saved, pl->saved, "saved state");
    if (st == MPX_OK) {
        void *const base[AR_COUNT] = {g->arena_values, g->arena_saved, g->arena_grads,
                                      g->arena_branches, g->arena_params};
        plan_addresses(g, &l, base);
    }
    free(l.v);
    return st;
}

/* Register layer l as an observer of tensor t's gradient counts (at most four per tensor). */
static mpx_status add_observer(gtensor *t, int l) {
    int slot = 0;
    while (slot < 4 && t->plan.observer[slot] >= 0) slot++;
    if (slot == 4)
        return mpx_fail(MPX_ERR_INTERNAL, "tensor '%s' observed by more than four layers", t->name);
    t->plan.observer[slot] = l;
    return MPX_OK;
}

/* An add's backward hands dy to both inputs unchanged (no factor, no rounding: the same
 * format). An input the add alone reads (so nothing else adds to its gradient) then takes the
 * add output's gradient storage as its own instead of a copy: its producer's backward reads
 * the values the add's consumer wrote. Not where the copy carries more than the values: an
 * input whose gradient keeps a statistics shadow or is counted by its own cast (both copies of
 * FP32 values before rounding). Nodes are visited last to first, so an add output that is
 * itself such an input already knows its root, and chains share one buffer; the memory plan
 * gives each root the union of its group's lifetimes. */
static void plan_shared_grads(mpx_graph *g) {
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const gnode *n = &g->nodes[i];
        if (n->op != OP_ADD) continue;
        const gtensor *out = &g->tensors[n->out];
        for (int s = 0; s < n->n_in; s++) {
            gtensor *t = &g->tensors[n->in[s]];
            if (!t->requires_grad || t->n_consumers != 1 || t->plan.needs_shadow ||
                (t->plan.observer[0] >= 0 && !t->plan.shadow_counted) ||
                t->plan.grad_dtype != out->plan.grad_dtype)
                continue;
            t->plan.grad_root = out->plan.grad_root;
            g->n_shared++;
        }
    }
}

/* A batch-norm with the ReLU after it fused may run that ReLU's backward too (graph_exec.c:
 * relu_bwd_fused): it reads the ReLU output's gradient as dy while it writes its input's
 * gradient. Its input's gradient (a convolution output's, the same shape) then takes the ReLU
 * output's gradient storage: the op reads each element of dy before it writes that element of
 * dx (its sums first, then one element-wise pass), so in place is safe, and the two blocks,
 * which the plan would otherwise place side by side in time, become one. Not when the input
 * has other readers, another gradient format, or a share of its own, nor when gradients are
 * kept for reading (mpx_graph_keep_grads: the two hold different values). */
static void plan_bn_inplace_grads(mpx_graph *g) {
    if (g->keep_grads) return;
    for (int i = 0; i < g->n_nodes; i++) {
        const gnode *n = &g->nodes[i];
        if (n->op != OP_BATCHNORM || n->plan.fused_relu < 0) continue;
        gtensor *in = &g->tensors[n->in[0]];
        const gtensor *y = &g->tensors[g->nodes[n->plan.fused_relu].out];
        if (!in->requires_grad || in->n_consumers != 1 || in->plan.grad_root != n->in[0] ||
            in->plan.grad_dtype != y->plan.grad_dtype)
            continue;
        in->plan.grad_root = y->plan.grad_root;
    }
}

/* Fuse each ReLU into the batch-norm or add that makes its only input, when that node's output
 * has no other reader: forward, the producer writes max(y, 0) into the ReLU's output and y is
 * never stored (nor given memory). Nothing else changes: batch-norm's backward reads its input
 * and saved statistics, add's reads nothing, ReLU's reads its own output, and the gradients —
 * what the statistics observe — are made as before. The one difference in bits: a negative
 * batch-norm or add result that 16-bit storage would have rounded to -0 is stored as +0 (the
 * fused op takes the ReLU before the rounding; the unfused ReLU passes -0 through). The value
 * keeps its own stochastic-rounding stream (round_id), so the stored bits are otherwise those
 * of the unfused graph in every rounding mode. */
static void plan_fusion(mpx_graph *g) {
    g->n_fused = g->n_shared = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        g->tensors[i].plan.elided = 0;
        g->tensors[i].plan.round_id = i;
        g->tensors[i].plan.grad_root = i;
    }
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].plan.fused_relu = g->nodes[i].plan.fused_into = -1;
    if (g->no_fusion) return;
    for (int i = 0; i < g->n_nodes; i++) {
        gnode *n = &g->nodes[i];
        gtensor *t = &g->tensors[n->out];
        if (!(n->op == OP_BATCHNORM || (n->op == OP_ADD && g->be->add_relu_forward))) continue;
        if (t->n_consumers != 1) continue;
        gnode *r = &g->nodes[t->consumers[0]];
        if (r->op != OP_RELU) continue;
        n->plan.fused_relu = t->consumers[0];
        r->plan.fused_into = i;
        t->plan.elided = 1;
        g->tensors[r->out].plan.round_id = n->out;
        g->n_fused++;
    }
    plan_shared_grads(g);
    plan_bn_inplace_grads(g);
}

void mpx_graph_fuse(mpx_graph *g, int on) { g->no_fusion = !on; }

/* A linear layer whose output only a softmax cross-entropy reads (as its logits) runs its forward
 * on the rows that loss reads: the rows whose label is >= 0. The ignored rows' logits are left
 * 0 — the loss never reads them (softmax_ce.c) and nothing else can — and their gradient is zero,
 * which the linear backward skips by itself (linear.c). */
static void plan_loss_rows(mpx_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].plan.loss_rows = -1;
    if (g->all_rows) return;
    for (int i = 0; i < g->n_nodes; i++) {
        const gnode *ce = &g->nodes[i];
        if (ce->op != OP_SOFTMAX_CE) continue;
        const gtensor *logits = &g->tensors[ce->in[0]];
        if (logits->n_consumers != 1 || logits->producer < 0) continue;
        gnode *p = &g->nodes[logits->producer];
        if ((p->op == OP_LINEAR && g->be->linear_forward_rows) ||
            (p->op == OP_LINEAR_T && g->be->linear_t_forward_rows))
            p->plan.loss_rows = ce->in[1];
    }
}

void mpx_graph_loss_rows(mpx_graph *g, int on) { g->all_rows = !on; }
void mpx_graph_sync_bn(mpx_graph *g, int on) { g->sync_bn = on; }
int mpx_graph_n_fused(const mpx_graph *g) { return g->n_fused; }
int mpx_graph_n_shared_grads(const mpx_graph *g) { return g->n_shared; }

static mpx_status init_state(mpx_graph *g, uint64_t seed) {
    int64_t biggest = 1;
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].numel > biggest) biggest = g->params[i].numel;
    for (int i = 0; i < g->n_buffers; i++)
        if (g->buffers[i].numel > biggest) biggest = g->buffers[i].numel;
    float *host = malloc((size_t)biggest * sizeof *host);
    if (!host) return mpx_fail(MPX_ERR_NOMEM, "out of memory initialising parameters");
    for (int i = 0; i < g->n_params; i++) {
        init_values(&g->params[i], seed, host);
        g->be->upload(g->be, g->params[i].master, host, (size_t)g->params[i].numel * sizeof(float));
    }
    /* Batch-norm running statistics start at mean 0, variance 1. */
    for (int i = 0; i < g->n_buffers; i++) {
        float fill = strstr(g->buffers[i].name, "running_var") ? 1.0f : 0.0f;
        for (int64_t k = 0; k < g->buffers[i].numel; k++) host[k] = fill;
        g->be->upload(g->be, g->buffers[i].data, host, (size_t)g->buffers[i].numel * sizeof(float));
    }
    free(host);
    /* Constant saved state the builder computed (SSD priors). */
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].aux_init)
            g->be->upload(g->be, g->nodes[i].plan.aux[0], g->nodes[i].aux_init,
                          (size_t)g->nodes[i].plan.aux_numel[0] * sizeof(float));
    return mpx_graph_sync_weights(g, 0);
}

mpx_status mpx_graph_compile(mpx_graph *g, const mpx_precision *prec, mpx_device device,
                             uint64_t seed) {
    if (g->status != MPX_OK) return g->status;
    const mpx_backend *be = mpx_backend_get(device);
    if (!be) return g->status = MPX_ERR_UNSUPPORTED;
    return mpx_graph_compile_backend(g, prec, be, seed);
}

mpx_status mpx_graph_compile_backend(mpx_graph *g, const mpx_precision *prec,
                                     const mpx_backend *be, uint64_t seed) {
    if (g->status != MPX_OK) return g->status;
    if (g->compiled) return mpx_fail(MPX_ERR_INTERNAL, "graph compiled twice");
    g->be = be;
    g->seed = seed;
    /* The executor's own needs; operators are checked when a node runs. */
    const char *missing = !g->be->decode ? "decode" : !g->be->moments ? "moments"
                        : !g->be->accumulate ? "accumulate"
                        : !g->be->absmax ? "absmax"
                        : !g->be->unscale_accumulate ? "unscale_accumulate"
                        : !g->be->abs_quantile ? "abs_quantile"
                        : !g->be->sumsq ? "sumsq" : !g->be->sgd_update ? "sgd_update"
                        : !g->be->adamw_update ? "adamw_update"
                        : !g->be->lamb_direction ? "lamb_direction"
                        : !g->be->scaled_sub ? "scaled_sub" : NULL;
    if (missing)
        return g->status = mpx_fail(MPX_ERR_UNSUPPORTED,
                                    "the %s backend cannot run graphs yet (no %s)", g->be->name,
                                    missing);
    g->prec = *prec;

    for (int i = 0; i < g->n_tensors; i++) {
        gtensor *t = &g->tensors[i];
        const gnode *n = &g->nodes[t->producer];
        t->plan.dtype = t->is_label ? MPX_I32 : mpx_precision_dtype(prec, t->role);
        if (n->op == OP_INPUT && t->role == MPX_ROLE_REDUCTION) t->plan.dtype = MPX_F32;
        t->plan.grad_dtype = mpx_precision_dtype(prec, MPX_ROLE_ACT_GRAD);
        t->requires_grad = !t->is_label && n->op != OP_INPUT && t->role == MPX_ROLE_ACTIVATION &&
                           n->n_param > 0;
        for (int k = 0; k < n->n_in && !t->requires_grad; k++)
            t->requires_grad = g->tensors[n->in[k]].requires_grad;
        if (t->role != MPX_ROLE_ACTIVATION) t->requires_grad = 0;
    }
    for (int i = 0; i < g->n_params; i++)
        g->params[i].work_dtype = mpx_precision_dtype(prec, g->params[i].role);

    /* Statistics observers: a layer's act stats describe the gradient of its output (the loss:
     * the gradient it emits into its input). Where that gradient is made by ReLU / add /
     * max-pool backward, which only move values, its rounding happened further down the
     * backward pass, where the op behind the chain computed it. So on statistics steps every
     * gradient along such a chain keeps an FP32 shadow of its value before rounding, the chain
     * ops run once more on the shadows, and the observed gradient is counted from the shadow:
     * the counts then say what FP16 storage did to exactly the values entering the layer
     * (ReLU's zeros included), without changing what training computes. */
    for (int l = 0; l < g->n_layers; l++) {
        gnode *n = &g->nodes[g->layer_node[l]];
        if (n->seeds_gradient) {
            /* A loss observes every gradient it emits (SSD's: confidences and locations). */
            for (int k = 0; k < n->n_in; k++)
                if (g->tensors[n->in[k]].requires_grad) MPX_TRY(add_observer(&g->tensors[n->in[k]], l));
            continue;
        }
        int ti = n->out;
        gtensor *t = &g->tensors[ti];
        MPX_TRY(add_observer(t, l));
        for (int cur = ti; g->tensors[cur].n_consumers == 1;) {
            const gnode *c = &g->nodes[g->tensors[cur].consumers[0]];
            if (!op_moves_values(c->op)) break;
            t->plan.shadow_counted = 1;
            cur = c->out;
            g->tensors[cur].plan.needs_shadow = 1;
        }
    }

    plan_fusion(g);
    plan_loss_rows(g);
    mpx_status st = plan_and_allocate(g);
    if (st == MPX_OK) {
        /* counts and moments of every layer in one block: one download per statistics step
         * (mpx_cast_stats is all 64-bit counters, so the moments behind it stay aligned) */
        const size_t layers = (size_t)(g->n_layers > 0 ? g->n_layers : 1);
        const size_t rows = layers * STATS_ROW, mrows = layers * 2;
        g->stats_bytes = rows * sizeof(mpx_cast_stats) + mrows * sizeof(mpx_moments);
        g->dev_stats = g->be->alloc(g->be, g->stats_bytes);
        g->host_stats = calloc(1, g->stats_bytes);
        g->moments_due = calloc(mrows, 1);
        if (g->dev_stats && g->host_stats) {
            g->dev_moments = (mpx_moments *)(g->dev_stats + rows);
            g->host_moments = (mpx_moments *)(g->host_stats + rows);
        }
        g->status_bytes = sizeof(step_status) + (size_t)g->n_params * sizeof(double);
        g->dev_status = g->be->alloc(g->be, g->status_bytes);
        g->host_status = calloc(1, g->status_bytes);
        g->merge_slots = g->be->alloc(g->be, MAX_CONSUMERS * sizeof(float));
        if (!g->dev_stats || !g->host_stats || !g->moments_due || !g->dev_status ||
            !g->host_status ||
            !g->merge_slots)
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory for statistics");
    }
    if (st == MPX_OK) {
        g->compiled = 1;
        st = init_state(g, seed);
    }
    if (st == MPX_OK) st = fp8_init(g);
    if (st != MPX_OK) {
        g->compiled = 0;
        g->status = st;
    }
    return st;
}

void mpx_graph_free(mpx_graph *g) {
    if (!g) return;
    if (g->be) {
        void *arenas[] = {g->arena_values, g->arena_grads, g->arena_branches,
                          g->scratch,      g->arena_params, g->arena_saved, g->dev_stats,
                          g->dev_status,   g->merge_slots};
        for (size_t i = 0; i < sizeof arenas / sizeof *arenas; i++)
            if (arenas[i]) g->be->free(g->be, arenas[i]);
    }
    for (int i = 0; i < g->n_nodes; i++) free(g->nodes[i].aux_init);
    fp8_free(g);
    free(g->host_stats);
    free(g->moments_due);
    free(g->host_status);
    free(g->tensors);
    free(g->nodes);
    free(g->params);
    free(g->buffers);
    free(g->layer_node);
    free(g);
}

int mpx_graph_n_params(const mpx_graph *g) { return g->n_params; }
mpx_param *mpx_graph_param(mpx_graph *g, int i) { return &g->params[i]; }
int mpx_graph_param_layer(const mpx_graph *g, int i) { return g->nodes[g->params[i].node].layer; }
int mpx_graph_n_buffers(const mpx_graph *g) { return g->n_buffers; }
mpx_buffer *mpx_graph_buffer(mpx_graph *g, int i) { return &g->buffers[i]; }
int mpx_graph_n_layers(const mpx_graph *g) { return g->n_layers; }

int64_t mpx_graph_param_count(const mpx_graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->n_params; i++) n += g->params[i].numel;
    return n;
}

void mpx_graph_layer(const mpx_graph *g, int i, mpx_layer_info *out) {
    const gnode *n = &g->nodes[g->layer_node[i]];
    out->name = n->name;
    out->kind = op_name(n->op);
    out->params = 0;
    for (int k = 0; k < n->n_param; k++) out->params += g->params[n->param[k]].numel;
    out->fan_in = n->fan_in;
}

void mpx_graph_layer_scale(const mpx_graph *g, int layer, double *s_prev, double *s) {
    const gnode *n = &g->nodes[g->layer_node[layer]];
    *s_prev = n->sc.s_prev;
    *s = n->sc.layer_scale;
}

void mpx_graph_keep_grads(mpx_graph *g, int keep) { g->keep_grads = keep; }

int mpx_graph_n_nodes(const mpx_graph *g) { return g->n_nodes; }

void mpx_graph_get_node_state(const mpx_graph *g, int node, mpx_node_state *s) {
    const gnode *n = &g->nodes[node];
    *s = (mpx_node_state){n->sc.s_prev, n->sc.layer_scale, n->sc.unbound, n->sc.valid};
}

void mpx_graph_set_node_state(mpx_graph *g, int node, const mpx_node_state *s) {
    gnode *n = &g->nodes[node];
    n->sc.s_prev = s->s_prev;
    n->sc.layer_scale = s->layer_scale;
    n->sc.unbound = s->als_unbound;
    n->sc.valid = s->als_valid;
}

const mpx_backend *mpx_graph_backend(const mpx_graph *g) { return g->be; }

void mpx_graph_download(const mpx_graph *g, void *host, const void *src, size_t bytes) {
    g->be->download(g->be, host, src, bytes);
}

void mpx_graph_upload(const mpx_graph *g, void *dst, const void *host, size_t bytes) {
    g->be->upload(g->be, dst, host, bytes);
}

int mpx_graph_find_tensor(const mpx_graph *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return i;
    return -1;
}

int mpx_graph_tensor_shape(const mpx_graph *g, int tensor, int64_t *shape) {
    const gtensor *t = &g->tensors[tensor];
    if (shape) memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
    return t->ndim;
}

double mpx_graph_flops(const mpx_graph *g, int training) {
    double f = 0;
    for (int i = 0; i < g->n_nodes; i++) f += node_flops(g, &g->nodes[i], training);
    return f;
}

void mpx_graph_memory(const mpx_graph *g, mpx_memory_plan *out) { *out = g->plan; }

void mpx_graph_print_plan(const mpx_graph *g, FILE *f) {
    const mpx_memory_plan *p = &g->plan;
    const double mib = 1.0 / (1 << 20);
    fprintf(f, "memory plan (%s, %s storage):\n", g->be ? g->be->name : "?",
            mpx_dtype_name(g->prec.low));
    fprintf(f, "  activations      %10.1f MiB  (%d tensors, kept for backward; %d not stored: "
            "ReLUs fused into the op before them)\n", p->values * mib, g->n_tensors - g->n_fused,
            g->n_fused);
    fprintf(f, "  gradients        %10.1f MiB  (shared by lifetime; %d add inputs share the add's)\n",
            p->grads * mib, g->n_shared);
    fprintf(f, "  branch gradients %10.1f MiB  (FP32: fan-out merges, statistics shadows)\n",
            p->branches * mib);
    fprintf(f, "  scratch          %10.1f MiB  (FP32 views of one op)\n", p->scratch * mib);
    fprintf(f, "  parameters       %10.1f MiB  (%lld elements: master, gradient, working copy)\n",
            p->params * mib, (long long)mpx_graph_param_count(g));
    fprintf(f, "  saved state      %10.1f MiB  (norm statistics, probabilities)\n", p->saved * mib);
    fprintf(f, "  total            %10.1f MiB\n", p->total * mib);
}
