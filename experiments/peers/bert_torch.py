#!/usr/bin/env python3
"""bert_torch.py — the PyTorch peer of mpx's BERT masked-LM training step (CPU or CUDA).

The network of experiments/configs/bert/<scale>/fp32.cfg built the same way as models/bert.c
(defaults: scale `small`, bert_tiny: 2 layers, hidden 128, 2 heads, FFN 512, vocab 8192,
512 positions, 2 segment types, sequences of 128, batch 32). One training step = forward,
masked-LM cross-entropy, backward, AdamW, on one fixed batch, like `mpx bench`. Prints one
JSON line (the fields of resnet50_torch.py, plus seq_len, attention, the last step's loss and
masked, the number of positions with a label).

What matches mpx:
  * embeddings: token + position + segment summed -> LayerNorm (eps 1e-12) -> dropout 0.1;
  * post-LN layers: separate Q, K, V Linear layers (with bias), scores = q k^T / sqrt(d), softmax
    over the keys with the padding mask, dropout on the probabilities, context, output Linear,
    dropout, residual add, LayerNorm; FFN Linear H->4H, GELU in the exact erf form (as
    lib/ops/gelu.c), Linear 4H->H, dropout, residual add, LayerNorm;
  * MLM head: Linear H->H, GELU, LayerNorm, decoder tied to the word-embedding matrix plus a
    bias; softmax cross-entropy over the vocabulary, labels -1 ignored, mean over the labelled
    positions;
  * the decoder runs only on the labelled (~15%) positions, as mpx's decoder, which computes
    logits only for rows whose label is >= 0: the peer gathers those positions before the
    decoder (a strong PyTorch MLM implementation does this too; the gather is inside the timed
    step). Everything before the decoder runs on all B x T positions, as in mpx;
  * parameters: the same tensors (the decoder weight is the word embedding, counted once):
    1,536,128 at scale small, as `mpx info experiments/configs/bert/small/fp32.cfg`;
  * AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-6, decoupled weight decay 0.01) with weight decay on
    the weight matrices and embeddings only, not on biases and LayerNorm parameters, as mpx;
    N(0, 0.02) weights, zero biases, as mpx's initialisation.
What differs:
  * the batch is fixed random data (ids uniform in [0, vocab), sentence A/B segments, a padded
    tail on some sequences, exactly round(0.15 * length) labelled positions per sequence, in
    [0, vocab)), not a batch of the corpus with its 80/10/10 replacement; the work per step is
    the same up to the number of labelled rows (mpx's batch has ~15% of them, the peer exactly
    15% of the unpadded tokens);
  * --attention sdpa (the default) computes the attention with
    torch.nn.functional.scaled_dot_product_attention (the same mask, scale and dropout on the
    probabilities, but PyTorch's fused kernel: what nn.TransformerEncoderLayer and Hugging
    Face's BERT use today); --attention explicit spells out matmul -> masked softmax ->
    dropout -> matmul, op for op as mpx's graph;
  * --precision amp-bf16 / amp-fp16 is torch.autocast, amp-fp16 with a GradScaler: the Linear
    layers, matmuls and the fused attention in the low precision; on the CPU autocast leaves
    LayerNorm, GELU, softmax and dropout at the dtype of their input (the layers' LayerNorms
    read the residual sum with the FP32 stream, so they run in FP32; the MLM head's LayerNorm
    runs in the low precision), and the cross-entropy in FP32. mpx's bf16 / fp16 modes have
    their own op paths (FP32 for everything but the GEMMs; `mpx info` lists them). Where the
    CPU has no fp16 arithmetic PyTorch's fp16 GEMMs are slow, as mpx's emulated fp16 is.

  python3 bert_torch.py --threads 2 --steps 10
  python3 bert_torch.py --precision amp-bf16 --attention explicit
  python3 bert_torch.py --device cuda --layers 12 --hidden 768 --heads 12 --batch 32 \
      --precision amp-fp16

Optional: needs `pip install torch` (CPU is enough); compare.sh runs it beside mpx.
"""
import argparse
import json
import math
import statistics
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")  # torch without numpy warns at import
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def dense(cin, cout, std):
    lin = nn.Linear(cin, cout)
    nn.init.normal_(lin.weight, 0.0, std)
    nn.init.zeros_(lin.bias)
    return lin


class Layer(nn.Module):
    def __init__(self, h, heads, ffn, p, eps, std, attention):
        super().__init__()
        self.heads, self.p, self.attention = heads, p, attention
        self.q, self.k, self.v = dense(h, h, std), dense(h, h, std), dense(h, h, std)
        self.out, self.attn_ln = dense(h, h, std), nn.LayerNorm(h, eps=eps)
        self.ffn_in, self.ffn_out = dense(h, ffn, std), dense(ffn, h, std)
        self.ffn_ln = nn.LayerNorm(h, eps=eps)

    def split(self, x):  # [B, T, H] -> [B, A, T, D]
        b, t, h = x.shape
        return x.view(b, t, self.heads, h // self.heads).transpose(1, 2)

    def forward(self, x, keep, bias):
        b, t, h = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        p = self.p if self.training else 0.0
        if self.attention == "sdpa":
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=p)
        else:
            s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(h // self.heads))
            pr = F.softmax(s + bias, dim=-1)
            ctx = torch.matmul(F.dropout(pr, p, self.training), v)
        ctx = ctx.transpose(1, 2).reshape(b, t, h)
        x = self.attn_ln(F.dropout(self.out(ctx), self.p, self.training) + x)
        f = self.ffn_out(F.gelu(self.ffn_in(x)))  # GELU: the exact erf form
        return self.ffn_ln(F.dropout(f, self.p, self.training) + x)


class Bert(nn.Module):
    def __init__(self, layers, h, heads, ffn, vocab, max_len, types, p=0.1, eps=1e-12, std=0.02,
                 attention="sdpa"):
        super().__init__()
        self.word, self.pos, self.seg = (nn.Embedding(vocab, h), nn.Embedding(max_len, h),
                                          nn.Embedding(types, h))
        for e in (self.word, self.pos, self.seg):
            nn.init.normal_(e.weight, 0.0, std)
        self.emb_ln, self.p = nn.LayerNorm(h, eps=eps), p
        self.layers = nn.ModuleList(Layer(h, heads, ffn, p, eps, std, attention)
                                    for _ in range(layers))
        self.mlm_dense, self.mlm_ln = dense(h, h, std), nn.LayerNorm(h, eps=eps)
        self.decoder_bias = nn.Parameter(torch.zeros(vocab))  # decoder weight: self.word.weight

    def forward(self, ids, positions, segments, mask, labels):
        x = self.word(ids) + self.pos(positions) + self.seg(segments)
        x = F.dropout(self.emb_ln(x), self.p, self.training)
        keep = mask.bool()[:, None, None, :]  # [B, 1, 1, T]: True = a key to attend to
        bias = None  # the explicit attention's additive mask
        if self.layers and self.layers[0].attention == "explicit":
            bias = torch.zeros(keep.shape, device=x.device).masked_fill(~keep, -1e30)
        for layer in self.layers:
            x = layer(x, keep, bias)
        x = self.mlm_ln(F.gelu(self.mlm_dense(x)))
        # The decoder only on the labelled positions (mpx computes no logits elsewhere).
        flat = labels.reshape(-1)
        sel = (flat >= 0).nonzero(as_tuple=True)[0]
        rows = x.reshape(-1, x.shape[-1]).index_select(0, sel)
        logits = F.linear(rows, self.word.weight, self.decoder_bias)
        return F.cross_entropy(logits.float(), flat.index_select(0, sel))


def fixed_batch(batch, t, vocab, types, gen, dev):
    ids = torch.randint(0, vocab, (batch, t), generator=gen)
    positions = torch.arange(t).expand(batch, t).contiguous()
    segments = torch.zeros(batch, t, dtype=torch.long)
    mask = torch.ones(batch, t, dtype=torch.long)
    labels = torch.full((batch, t), -1, dtype=torch.long)
    for b in range(batch):
        # Every other sequence has a padded tail of up to a quarter of the length.
        n = t if b % 2 == 0 else t - int(torch.randint(1, t // 4 + 1, (1,), generator=gen))
        mask[b, n:] = 0
        if types > 1:
            segments[b, int(torch.randint(n // 4, 3 * n // 4 + 1, (1,), generator=gen)):n] = 1
        k = max(1, round(0.15 * n))
        at = torch.randperm(n, generator=gen)[:k]
        labels[b, at] = torch.randint(0, vocab, (k,), generator=gen)
    return [x.to(dev) for x in (ids, positions, segments, mask, labels)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=0, help="FFN width (default 4 x hidden)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--types", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--attention", choices=["sdpa", "explicit"], default="sdpa")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "tf32", "amp-fp16", "amp-bf16"], default="fp32")
    a = ap.parse_args()
    if a.device == "cpu" and a.precision == "tf32":
        ap.error("--precision tf32 needs --device cuda")
    if a.hidden % a.heads or a.seq_len > a.max_len or a.seq_len < 4:
        ap.error("hidden must be a multiple of heads and 4 <= seq-len <= max-len")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    if a.device == "cuda":
        tf32 = a.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    amp = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(a.precision)
    model = Bert(a.layers, a.hidden, a.heads, a.ffn or 4 * a.hidden, a.vocab, a.max_len, a.types,
                 p=a.dropout, attention=a.attention).to(dev)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
    scaler = torch.amp.GradScaler(a.device, enabled=amp is torch.float16)
    gen = torch.Generator().manual_seed(0)
    ids, positions, segments, mask, labels = fixed_batch(a.batch, a.seq_len, a.vocab, a.types,
                                                         gen, dev)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times = []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=amp or torch.float32, enabled=amp is not None):
            loss = model(ids, positions, segments, mask, labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"peer": "pytorch", "model": "bert", "torch": torch.__version__,
                      "device": a.device, "precision": a.precision, "threads": a.threads,
                      "batch": a.batch, "seq_len": a.seq_len, "attention": a.attention,
                      "masked": int((labels >= 0).sum()), "params": params, "loss": loss.item(),
                      "median_s": med, "min_s": min(times), "samples_per_s": a.batch / med}))


if __name__ == "__main__":
    main()
