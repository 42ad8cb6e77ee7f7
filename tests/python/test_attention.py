"""attention, attention_paged, kv_cache_write and qk_norm_rope_cache against
NumPy: varlen batches with empty sequences, causal and not, GQA and MQA,
the score options, LSE, dropout's determinism, head views of a packed qkv, a paged cache in a
shuffled block order, every dtype and path."""
import numpy as np
import pyopencl.array as cla
import pytest

import oclfuse
from oclfuse import _capi
from conftest import DTYPES, PATHS, assert_close, rand, value
from test_rope import cache as rope_cache

# The contract's bound: |o - ref| <= tol (1 + max |v|) per row, LSE within tol.
ATOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}


def needs(*names):
    gone = _capi.missing(*names)
    return pytest.mark.skipif(bool(gone), reason="the loaded liboclfuse does not export "
                              + ", ".join(gone) + " yet")


def ref_attention(q, k, v, cuq, cuk, scale=0.0, causal=False, window=None, softcap=0.0,
                  alibi=None, sinks=None):
    """fp64: out [Tq, Hq, D] and lse [Hq, Tq] from float64 inputs."""
    tq, hq, d = q.shape
    g = hq // k.shape[1]
    sc = scale if scale else 1.0 / np.sqrt(d)
    out = np.zeros((tq, hq, d))
    lse = np.full((hq, tq), -np.inf)
    for b in range(len(cuq) - 1):
        q0, sq = cuq[b], cuq[b + 1] - cuq[b]
        k0, sk = cuk[b], cuk[b + 1] - cuk[b]
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        diag = i + sk - sq
        keep = np.ones((sq, sk), bool)
        if causal:
            keep &= j <= diag
        if window is not None:
            left, right = (-1 if w is None else w for w in window)
            if left >= 0:
                keep &= j >= diag - left
            if right >= 0:
                keep &= j <= diag + right
        for h in range(hq):
            kh = h // g
            s = sc * q[q0:q0 + sq, h] @ k[k0:k0 + sk, kh].T
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            if alibi is not None:
                s = s - alibi[h] * np.abs(diag - j)
            s = np.where(keep, s, -np.inf)
            m = s.max(axis=1, initial=-np.inf)
            if sinks is not None:
                m = np.maximum(m, sinks[h])
            mm = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(s - mm[:, None])
            den = p.sum(axis=1) + (np.exp(sinks[h] - mm) if sinks is not None else 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                o = np.where(den[:, None] > 0, (p @ v[k0:k0 + sk, kh]) / den[:, None], 0.0)
                lse[h, q0:q0 + sq] = np.where(den > 0, mm + np.log(den), -np.inf)
            out[q0:q0 + sq, h] = o
    return out, lse


def assert_attention(got, ref, v, dt, lse=None, ref_lse=None):
    g = value(got, dt)
    assert g.shape == ref.shape
    tol = ATOL[dt] * (1 + (np.abs(v).max() if v.size else 1.0))
    err = np.abs(g - ref)
    assert not np.isnan(g).any(), "NaN in the output"
    assert (err <= tol).all(), f"{dt}: max error {err.max()} > {tol}"
    if lse is not None:
        l = np.asarray(lse, np.float64)
        both_inf = np.isneginf(l) & np.isneginf(ref_lse)
        with np.errstate(invalid="ignore"):
            ok = both_inf | (np.abs(l - ref_lse) <= ATOL[dt])
        assert ok.all(), f"LSE: got {l[~ok][:4]}, expected {ref_lse[~ok][:4]}"


def cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


SQ, SK = [3, 0, 5, 1, 2], [4, 2, 5, 3, 0]


@needs("oclf_attention")
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hq,hk", [(4, 2), (3, 1), (2, 2)])
def test_attention(ctx, rng, dt, path, causal, hq, hk):
    d = 20
    cuq, cuk = cu(SQ), cu(SK)
    q = rand(rng, (cuq[-1], hq, d), dt, -1, 1)
    k = rand(rng, (cuk[-1], hk, d), dt, -1, 1)
    v = rand(rng, (cuk[-1], hk, d), dt, -1, 1)
    want, _ = ref_attention(value(q, dt), value(k, dt), value(v, dt), cuq, cuk, causal=causal)
    got = oclfuse.attention(q, k, v, cuq, cuk, causal=causal, path=path)
    assert got.shape == q.shape and got.dtype == q.dtype
    assert_attention(got, want, value(v, dt), dt)


@needs("oclf_attention")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("opts", [
    dict(scale=0.3, softcap=0.8),
    dict(causal=True, window=(2, None)),
    dict(window=(1, 1)),
    dict(causal=True, alibi=True, sinks=True),
])
def test_attention_options_and_lse(ctx, rng, path, opts):
    dt, hq, hk, d = "f32", 4, 1, 16
    cuq, cuk = cu(SQ), cu(SK)
    q = rand(rng, (cuq[-1], hq, d), dt, -1, 1)
    k = rand(rng, (cuk[-1], hk, d), dt, -1, 1)
    v = rand(rng, (cuk[-1], hk, d), dt, -1, 1)
    kw = dict(opts)
    alibi = rng.uniform(0.1, 0.5, hq).astype(np.float32) if kw.pop("alibi", False) else None
    sinks = rng.uniform(-1, 1, hq).astype(np.float32) if kw.pop("sinks", False) else None
    want, wl = ref_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                             cuq, cuk, alibi=alibi, sinks=sinks, **kw)
    out, lse = oclfuse.attention(q, k, v, cuq, cuk, max(SQ), alibi_slopes=alibi, sinks=sinks,
                                 return_lse=True, path=path, **kw)
    assert lse.shape == (hq, cuq[-1]) and lse.dtype == np.float32
    assert_attention(out, want, v, dt, lse, wl)


@needs("oclf_attention")
@pytest.mark.parametrize("path", PATHS)
def test_attention_views_of_packed_qkv(queue, rng, path):
    """q, k, v as head views of one device qkv; out a strided view whose
    padding stays as it was."""
    dt, tokens, hq, hk, d = "f16", 7, 4, 2, 8
    qkv = rand(rng, (tokens, hq + 2 * hk, d), dt, -1, 1)
    lens = cu([4, 3])
    dqkv = cla.to_device(queue, qkv)
    big = np.full((tokens, hq + 1, d), 7, np.float16)
    dbig = cla.to_device(queue, big)
    oclfuse.attention(dqkv[:, :hq], dqkv[:, hq:hq + hk], dqkv[:, hq + hk:], lens, lens,
                      causal=True, out=dbig[:, :hq], path=path)
    got = dbig.get()
    x = value(qkv, dt)
    want, _ = ref_attention(x[:, :hq], x[:, hq:hq + hk], x[:, hq + hk:], lens, lens, causal=True)
    assert_attention(got[:, :hq], want, x[:, hq + hk:], dt)
    np.testing.assert_array_equal(got[:, hq:], big[:, hq:])
    np.testing.assert_array_equal(dqkv.get(), qkv)


@needs("oclf_attention")
def test_attention_refused(ctx, rng):
    q = rand(rng, (3, 3, 8), "f32")
    k = rand(rng, (3, 2, 8), "f32")
    with pytest.raises(oclfuse.OclfError) as e:
        oclfuse.attention(q, k, k, cu([3]), cu([3]))
    assert e.value.status == oclfuse.INVALID_ARGUMENT and "multiple" in e.value.message
    with pytest.raises(TypeError):
        oclfuse.attention(q.astype(np.float16), k, k, cu([3]), cu([3]))


@needs("oclf_attention")
def test_attention_dropout(ctx, rng):
    """The mask is the library's (Philox): the same on both paths and for the
    same seed, another for another seed; p = 0 is no dropout; the LSE is
    taken before it; p >= 1 is refused."""
    dt, hq, hk, d = "f32", 2, 1, 8
    cuq = cuk = cu([6, 5])
    q = rand(rng, (11, hq, d), dt, -1, 1)
    k = rand(rng, (11, hk, d), dt, -1, 1)
    v = rand(rng, (11, hk, d), dt, -1, 1)
    plain, l0 = oclfuse.attention(q, k, v, cuq, cuk, causal=True, return_lse=True)
    none = oclfuse.attention(q, k, v, cuq, cuk, causal=True, dropout_p=0.0, dropout_seed=5)
    np.testing.assert_array_equal(none, plain)
    got = {}
    for path in PATHS:
        for seed in (1, 2):
            got[path, seed], l1 = oclfuse.attention(q, k, v, cuq, cuk, causal=True,
                                                    dropout_p=0.5, dropout_seed=seed,
                                                    return_lse=True, path=path)
            np.testing.assert_allclose(l1, l0, atol=ATOL[dt])
    for seed in (1, 2):
        np.testing.assert_allclose(got["fused", seed], got["unfused", seed], atol=1e-4)
    assert not np.allclose(got["fused", 1], got["fused", 2])
    assert not np.allclose(got["fused", 1], plain)
    with pytest.raises(oclfuse.OclfError) as e:
        oclfuse.attention(q, k, v, cuq, cuk, dropout_p=1.0)
    assert e.value.status == oclfuse.INVALID_ARGUMENT


# ---- paged cache ------------------------------------------------------------

def paged(rng, dt, seq_lens, hk, d, block_size):
    """A cache with the blocks handed out in a shuffled order and garbage
    elsewhere; (k_cache, v_cache, block_tables, contiguous K, V, cu_k)."""
    need = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(need) + 2
    max_blocks = max(need + [0]) + 1
    kc = rand(rng, (num_blocks, block_size, hk, d), dt, 20, 30)
    vc = rand(rng, (num_blocks, block_size, hk, d), dt, 20, 30)
    perm = rng.permutation(num_blocks)
    bt = np.full((len(seq_lens), max_blocks), -1, np.int32)
    ks, vs, nxt = [], [], 0
    for b, n in enumerate(seq_lens):
        bt[b, :need[b]] = perm[nxt:nxt + need[b]]
        nxt += need[b]
        for j in range(n):
            blk, slot = bt[b, j // block_size], j % block_size
            kc[blk, slot] = rand(rng, (hk, d), dt, -1, 1)
            vc[blk, slot] = rand(rng, (hk, d), dt, -1, 1)
            ks.append(kc[blk, slot])
            vs.append(vc[blk, slot])
    k = np.array(ks).reshape(-1, hk, d)
    v = np.array(vs).reshape(-1, hk, d)
    return kc, vc, bt, k, v, cu(seq_lens)


@needs("oclf_attention_paged")
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("block_size", [1, 16])
def test_attention_paged(ctx, rng, dt, path, block_size):
    """A mixed batch: decode, chunked prefill, an empty sequence, 1 token."""
    hq, hk, d = 4, 2, 16
    sq, seq_lens = [1, 4, 0, 1], [9, 20, 0, 1]
    kc, vc, bt, k, v, cuk = paged(rng, dt, seq_lens, hk, d, block_size)
    cuq = cu(sq)
    q = rand(rng, (cuq[-1], hq, d), dt, -1, 1)
    want, wl = ref_attention(value(q, dt), value(k, dt), value(v, dt), cuq, cuk, causal=True)
    out, lse = oclfuse.attention_paged(q, kc, vc, cuq, np.array(seq_lens, np.int32), bt,
                                       causal=True, return_lse=True, path=path)
    assert_attention(out, want, value(v, dt), dt, lse, wl)


@needs("oclf_attention_paged")
def test_attention_paged_split(queue, rng):
    """Device arrays, a split into partitions of 32 keys against none."""
    dt, hq, hk, d = "f32", 8, 2, 32
    seq_lens = [100, 37]
    kc, vc, bt, k, v, cuk = paged(rng, dt, seq_lens, hk, d, 16)
    cuq = cu([1, 2])
    q = rand(rng, (3, hq, d), dt, -1, 1)
    dev = [cla.to_device(queue, a) for a in (q, kc, vc, cuq, np.array(seq_lens, np.int32), bt)]
    want, _ = ref_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                            cuq, cuk, causal=True)
    for part in (0, 32):
        out = oclfuse.attention_paged(*dev, 2, causal=True, path="fused",
                                      params={"PART": part, "BK": 16})
        assert isinstance(out, cla.Array)
        assert_attention(out.get(), want, v, dt)


@needs("oclf_kv_cache_write")
@pytest.mark.parametrize("dt", DTYPES)
def test_kv_cache_write(ctx, rng, dt):
    tokens, hk, d, nb, bs = 5, 2, 8, 3, 4
    k, v = rand(rng, (tokens, hk, d), dt), rand(rng, (tokens, hk, d), dt)
    kc, vc = rand(rng, (nb, bs, hk, d), dt), rand(rng, (nb, bs, hk, d), dt)
    slots = np.array([7, -1, 0, 11, 4], np.int64)
    want_k, want_v = kc.copy(), vc.copy()
    for t, s in enumerate(slots):
        if s >= 0:
            want_k[s // bs, s % bs] = k[t]
            want_v[s // bs, s % bs] = v[t]
    gk, gv = oclfuse.kv_cache_write(k, v, kc, vc, slots)
    assert gk is kc and gv is vc
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)
    # the choice's row structure is taken (a WGS that is no power of two
    # is refused, nothing written), and gives the same copy
    kc2, vc2 = kc.copy(), vc.copy()
    with pytest.raises(oclfuse.OclfError, match="WGS"):
        oclfuse.kv_cache_write(k, v, kc2, vc2, slots, params={"LAYOUT": 1, "WGS": 3, "VEC": 1})
    np.testing.assert_array_equal(kc2, kc)
    kc2[...], vc2[...] = 0, 0
    oclfuse.kv_cache_write(k, v, kc2, vc2, slots, path="unfused",
                           params={"LAYOUT": 1, "WGS": 4, "VEC": 2})
    mask = slots[slots >= 0]
    np.testing.assert_array_equal(kc2.reshape(-1, hk, d)[mask], kc.reshape(-1, hk, d)[mask])
    np.testing.assert_array_equal(vc2.reshape(-1, hk, d)[mask], vc.reshape(-1, hk, d)[mask])


@needs("oclf_kv_cache_write")
def test_kv_cache_write_views(queue, rng):
    """k and v as head views of a device qkv, both caches in one buffer."""
    tokens, nq, hk, d, nb, bs = 3, 2, 1, 8, 2, 2
    qkv = rand(rng, (tokens, nq + 2 * hk, d), "bf16")
    kv = np.zeros((2, nb, bs, hk, d), np.uint16)
    dqkv, dkv = cla.to_device(queue, qkv), cla.to_device(queue, kv)
    slots = np.array([3, 0, 2], np.int64)
    oclfuse.kv_cache_write(dqkv[:, nq:nq + hk], dqkv[:, nq + hk:], dkv[0], dkv[1], slots)
    got = dkv.get()
    for t, s in enumerate(slots):
        np.testing.assert_array_equal(got[0, s // bs, s % bs], qkv[t, nq:nq + hk])
        np.testing.assert_array_equal(got[1, s // bs, s % bs], qkv[t, nq + hk:])
    assert not got[:, 0, 1].any()  # slot 1 untouched


@needs("oclf_qk_norm_rope_cache")
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
def test_qk_norm_rope_cache(ctx, rng, dt, path):
    """The same qkv as qk_norm_rope, and the rotated K and the V heads in the
    cache at their slots (bit for bit what the qkv holds)."""
    tokens, nq, nk, hd, max_pos, nb, bs = 4, 2, 1, 16, 8, 3, 2
    qkv = rand(rng, (tokens, nq + 2 * nk, hd), dt)
    qw, kw = rand(rng, hd, dt, 0.5, 1.5), rand(rng, hd, dt, 0.5, 1.5)
    pos = rng.integers(0, max_pos, tokens).astype(np.int64)
    cs = rope_cache(max_pos, hd, dt)
    kc, vc = rand(rng, (nb, bs, nk, hd), dt), rand(rng, (nb, bs, nk, hd), dt)
    slots = np.array([5, 0, -1, 2], np.int64)
    plain = oclfuse.qk_norm_rope(qkv.copy(), pos, cs, nq=nq, nk=nk, q_weight=qw, k_weight=kw,
                                 path=path)
    want_k, want_v = kc.copy(), vc.copy()
    out, gk, gv = oclfuse.qk_norm_rope_cache(qkv, pos, cs, slots, kc, vc, nq=nq, nk=nk,
                                             q_weight=qw, k_weight=kw, path=path)
    assert out is qkv and gk is kc and gv is vc
    assert_close(qkv, value(plain, dt), dt, "qkv")
    for t, s in enumerate(slots):
        if s >= 0:
            want_k[s // bs, s % bs] = qkv[t, nq:nq + nk]
            want_v[s // bs, s % bs] = qkv[t, nq + nk:]
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)
