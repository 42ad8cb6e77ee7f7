"""Against PyTorch's own layer_norm, silu and gelu (skipped where PyTorch is
not installed: python3-torch is optional)."""
import pytest

import oclfuse
from conftest import DTYPES, PATHS, assert_close, rand, value

torch = pytest.importorskip("torch")
F = torch.nn.functional


def t64(a, dt):
    return torch.from_numpy(value(a, dt))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
def test_layer_norm(ctx, rng, dt, path):
    x, w, b = rand(rng, (4, 77), dt, 3.0, 5.0), rand(rng, 77, dt), rand(rng, 77, dt)
    want = F.layer_norm(t64(x, dt), (77,), t64(w, dt), t64(b, dt), eps=1e-5).numpy()
    assert_close(oclfuse.layer_norm(x, w, b, eps=1e-5, path=path), want, dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("act,fn", [("silu", F.silu),
                                    ("gelu", lambda t: F.gelu(t)),
                                    ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh"))])
def test_act_and_mul(ctx, rng, dt, path, act, fn):
    x = rand(rng, (3, 2 * 45), dt, -5.0, 5.0)
    t = t64(x, dt)
    want = (fn(t[:, :45]) * t[:, 45:]).numpy()
    assert_close(oclfuse.act_and_mul(x, act, path=path), want, dt)
