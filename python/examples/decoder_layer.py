#!/usr/bin/env python3
"""Two small Llama-style decoder layers on the oclfuse package, checked
against a NumPy float64 reference of the same layers.

The layer is tools/layer.c's (docs/decoder-layer.md), one step of one
layer with x the residual stream [T, hidden] of the step's new tokens:

    n   = rms_norm(x) * norm_in                        oclfuse.rms_norm
    qkv = n Wqkv^T       Wqkv [(Hq + 2 Hk) hd, H]       oclfuse.linear / linear_q
    per-head RMSNorm of Q and K (unit weights), NeoX rotary at each token's
    position, K and V into the layer's paged cache      oclfuse.qk_norm_rope_cache
      (--no-qk-norm: no per-head norm;                  oclfuse.rotary_embedding,
                                                        oclfuse.kv_cache_write)
    a   = causal attention over the cache, GQA          oclfuse.attention_paged
    o   = a Wo^T; x += o; n = rms_norm(x) * norm_post   oclfuse.linear, add_rms_norm
    gu  = n Wgu^T        rows [0, MLP) gate, [MLP, 2 MLP) up
    h   = silu(gate) * up                               oclfuse.act_and_mul
    x   = x + h Wd^T     (residual epilogue, in place)  oclfuse.linear / linear_q

Batch 2: a prefill of 5 tokens a sequence, then 3 decode steps of one token
a sequence; each sequence has its own row of a block table over a shuffled
pool of blocks of 3 tokens. f32 activations; weights dense f32 (--weights
f32) or INT4 (--weights int4: NumPy quantizes them in groups of 64 along K,
f16 scales, no zero points, w = (q - 8) s; the reference uses the
dequantized weights). Weights, cache, block table and rotary table stay on
the device (PyOpenCL arrays); each step uploads its inputs and metadata
and reads back only the last layer's output.

Prints each step's error (max |got - ref| / the reference row's RMS) and
exits 1 when one exceeds --tol (1e-3).

    OCLFUSE_LIBRARY=build/liboclfuse.so.0 PYTHONPATH=python \\
        /usr/bin/python3 python/examples/decoder_layer.py --weights int4
"""
import argparse
import sys
import time

import numpy as np
import pyopencl.array as cla

import oclfuse

HIDDEN, HQ, HK, HD, MLP = 256, 4, 2, 64, 512
LAYERS, BATCH, PREFILL, DECODE, BLOCK = 2, 2, 5, 3, 3
EPS, THETA = 1e-5, 500000.0
GROUP = 64


# ---- weights -----------------------------------------------------------------

def quantize_int4(w, group=GROUP):
    """Symmetric INT4 in groups along K: (q bytes [N, K/2], f16 scales
    [N, K/group], the dequantized float64 weight)."""
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    s = (np.abs(g).max(axis=2) / 7.0).astype(np.float16)
    sf = s.astype(np.float64)
    sf_safe = np.where(sf == 0, 1.0, sf)
    q = np.clip(np.rint(g / sf_safe[:, :, None]) + 8, 0, 15).astype(np.uint8)
    deq = ((q.astype(np.float64) - 8) * sf[:, :, None]).reshape(n, k)
    q = q.reshape(n, k)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return packed, s, deq


def make_weights(rng, int4):
    """Per layer: host float64 copies (what the device computes with) and the
    device operands."""
    shapes = {"qkv": ((HQ + 2 * HK) * HD, HIDDEN), "o": (HIDDEN, HQ * HD),
              "gu": (2 * MLP, HIDDEN), "d": (HIDDEN, MLP)}
    layers = []
    for _ in range(LAYERS):
        host = {"norm_in": rng.uniform(0.8, 1.2, HIDDEN).astype(np.float32),
                "norm_post": rng.uniform(0.8, 1.2, HIDDEN).astype(np.float32)}
        for name, (n, k) in shapes.items():
            a = np.sqrt(3.0 / k)  # uniform [-a, a): sd 1/sqrt(k)
            host[name] = rng.uniform(-a, a, (n, k)).astype(np.float32)
        layers.append(host)
    return shapes, layers


def upload_layer(queue, host, shapes, int4):
    dev = {"norm_in": cla.to_device(queue, host["norm_in"]),
           "norm_post": cla.to_device(queue, host["norm_post"])}
    ref = {"norm_in": host["norm_in"].astype(np.float64),
           "norm_post": host["norm_post"].astype(np.float64)}
    for name in shapes:
        w = host[name]
        if int4:
            q, s, deq = quantize_int4(w)
            dev[name] = (cla.to_device(queue, q), cla.to_device(queue, s))
            ref[name] = deq
        else:
            dev[name] = cla.to_device(queue, w)
            ref[name] = w.astype(np.float64)
    return dev, ref


def linear(x, w, *, residual=None, out=None):
    if isinstance(w, tuple):
        q, s = w
        return oclfuse.linear_q(x, q, s, format="int4", group=GROUP, residual=residual,
                                out=out)
    return oclfuse.linear(x, w, residual=residual, out=out)


# ---- the float64 reference -----------------------------------------------------

def rms(x, w, eps=EPS):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, cos_sin):
    """NeoX (rotate-half) rotary of x [T, heads, hd] at positions pos [T]."""
    cs = cos_sin.astype(np.float64)[pos]  # [T, hd]: cos half | sin half
    c, s = cs[:, None, :HD // 2], cs[:, None, HD // 2:]
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def ref_layer(x, W, cache, pos, seqs, qk_norm, cos_sin):
    """One layer on x [T, H] (float64) whose rows belong to sequences seqs
    [T]; cache: per sequence, lists of K and V heads [Hk, hd] (appended)."""
    T = x.shape[0]
    n = rms(x, W["norm_in"])
    qkv = (n @ W["qkv"].T).reshape(T, HQ + 2 * HK, HD)
    q, k, v = qkv[:, :HQ], qkv[:, HQ:HQ + HK], qkv[:, HQ + HK:]
    if qk_norm:
        q, k = rms(q, 1.0), rms(k, 1.0)
    q, k = rope(q, pos, cos_sin), rope(k, pos, cos_sin)
    for t in range(T):
        cache[seqs[t]][0].append(k[t])
        cache[seqs[t]][1].append(v[t])
    a = np.empty((T, HQ, HD))
    for t in range(T):
        K = np.stack(cache[seqs[t]][0][:pos[t] + 1])  # causal: keys up to its position
        V = np.stack(cache[seqs[t]][1][:pos[t] + 1])
        for h in range(HQ):
            kh = h // (HQ // HK)
            sc = K[:, kh] @ q[t, h] / np.sqrt(HD)
            p = np.exp(sc - sc.max())
            a[t, h] = (p / p.sum()) @ V[:, kh]
    x = x + a.reshape(T, HQ * HD) @ W["o"].T
    n = rms(x, W["norm_post"])
    gu = n @ W["gu"].T
    g, u = gu[:, :MLP], gu[:, MLP:]
    h = g / (1.0 + np.exp(-g)) * u
    return x + h @ W["d"].T


# ---- main ------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", choices=["f32", "int4"], default="f32")
    ap.add_argument("--no-qk-norm", action="store_true",
                    help="rotary_embedding + kv_cache_write, no per-head RMSNorm")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    int4, qk_norm = args.weights == "int4", not args.no_qk_norm
    t_start = time.perf_counter()

    queue = oclfuse.default_context().queue
    rng = np.random.default_rng(args.seed)
    shapes, host_layers = make_weights(rng, int4)
    layers = [upload_layer(queue, h, shapes, int4) for h in host_layers]

    # the paged cache: a shuffled pool of blocks, a block table row a sequence
    max_pos = PREFILL + DECODE
    max_blocks = -(-max_pos // BLOCK)
    num_blocks = BATCH * max_blocks
    table = rng.permutation(num_blocks).astype(np.int32).reshape(BATCH, max_blocks)
    d_table = cla.to_device(queue, table)
    caches = [(cla.zeros(queue, (num_blocks, BLOCK, HK, HD), np.float32),
               cla.zeros(queue, (num_blocks, BLOCK, HK, HD), np.float32))
              for _ in range(LAYERS)]

    # the rotary table [max_pos, hd]: cos | sin, NeoX frequencies
    j = np.arange(HD // 2)
    ang = np.arange(max_pos)[:, None] * THETA ** (-2.0 * j / HD)
    cos_sin = np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)
    d_cos_sin = cla.to_device(queue, cos_sin)

    ref_caches = [[([], []) for _ in range(BATCH)] for _ in range(LAYERS)]
    worst = 0.0
    for step in range(1 + DECODE):
        per = PREFILL if step == 0 else 1
        T = BATCH * per
        seqs = np.repeat(np.arange(BATCH), per)
        pos = (np.tile(np.arange(PREFILL), BATCH) if step == 0
               else np.full(BATCH, PREFILL + step - 1)).astype(np.int32)
        slots = (table[seqs, pos // BLOCK].astype(np.int64) * BLOCK + pos % BLOCK)
        cu_q = (np.arange(BATCH + 1) * per).astype(np.int32)
        lens = np.full(BATCH, PREFILL + step, np.int32)
        x0 = rng.uniform(-np.sqrt(3), np.sqrt(3), (T, HIDDEN)).astype(np.float32)

        d_pos, d_slots = cla.to_device(queue, pos), cla.to_device(queue, slots)
        d_cu, d_lens = cla.to_device(queue, cu_q), cla.to_device(queue, lens)
        x = cla.to_device(queue, x0)
        for (W, _), (kc, vc) in zip(layers, caches):
            n = oclfuse.rms_norm(x, W["norm_in"], eps=EPS)
            qkv = linear(n, W["qkv"]).reshape(T, HQ + 2 * HK, HD)
            q = qkv[:, :HQ, :]
            if qk_norm:
                oclfuse.qk_norm_rope_cache(qkv, d_pos, d_cos_sin, d_slots, kc, vc, nq=HQ,
                                           nk=HK, eps=EPS)
            else:
                k, v = qkv[:, HQ:HQ + HK, :], qkv[:, HQ + HK:, :]
                oclfuse.rotary_embedding(q, d_pos, d_cos_sin, k)
                oclfuse.kv_cache_write(k, v, kc, vc, d_slots)
            a = oclfuse.attention_paged(q, kc, vc, d_cu, d_lens, d_table, per, causal=True,
                                        path="fused")
            o = linear(a.reshape(T, HQ * HD), W["o"])
            oclfuse.add_rms_norm(o, x, W["norm_post"], eps=EPS)  # x += o; o = rms_norm(x)
            h = oclfuse.act_and_mul(linear(o, W["gu"]), "silu")
            linear(h, W["d"], residual=x, out=x)
        got = x.get().astype(np.float64)

        ref = x0.astype(np.float64)
        for (_, R), rc in zip(layers, ref_caches):
            ref = ref_layer(ref, R, rc, pos, seqs, qk_norm, cos_sin)
        row_rms = np.sqrt(np.mean(ref * ref, axis=1, keepdims=True))
        err = float(np.max(np.abs(got - ref) / row_rms))
        worst = max(worst, err)
        kind = "prefill" if step == 0 else "decode "
        print(f"step {step} {kind} {T:2d} tokens, {lens[0]} keys a sequence: "
              f"max error / row RMS {err:.3e}{'  FAIL' if err > args.tol else ''}")

    ok = worst <= args.tol
    print(f"{args.weights} weights, {'qk_norm_rope_cache' if qk_norm else 'rotary + cache write'}"
          f": worst {worst:.3e} (tolerance {args.tol:g}), {time.perf_counter() - t_start:.1f} s"
          f" -> {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
