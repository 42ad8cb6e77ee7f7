"""The README's Python example, extracted and run as written there."""
import os
import re

import numpy as np


def test_readme_example():
    readme = os.environ.get("OCLFUSE_README") or os.path.join(
        os.path.dirname(__file__), "..", "..", "README.md")
    text = open(readme).read()
    section = text[text.index("## From Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope = {}
    exec(compile(code, "README.md (From Python)", "exec"), scope)
    # the example leaves y (rms_norm of x) and a device result
    y = scope["y"]
    ms = (y.astype(np.float64) ** 2).mean(axis=1)
    np.testing.assert_allclose(ms, 1.0, atol=1e-3)
    assert scope["dist"].shape == (2, 3)
