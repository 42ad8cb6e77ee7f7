"""python/examples/decoder_layer.py (docs/decoder-layer.md): two small
decoder layers on the package's calls, a prefill and decode steps over a
paged KV cache, against the example's own float64 reference; run as a
script, as docs/decoder-layer.md shows, with each weight kind and both rotary forms."""
import os
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                       "examples", "decoder_layer.py")


@pytest.mark.parametrize("args", [["--weights", "f32"], ["--weights", "int4"],
                                  ["--weights", "int4", "--no-qk-norm"]],
                         ids=["f32", "int4", "int4-no-qk-norm"])
def test_decoder_layer_example(args):
    r = subprocess.run([sys.executable, EXAMPLE] + args, capture_output=True, text=True,
                       timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"decoder_layer.py {' '.join(args)} exited {r.returncode}:\n{out}"
    steps = [line for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(steps) == 4, out  # the prefill and 3 decode steps
    assert "-> ok" in r.stdout, out
