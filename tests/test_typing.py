# SPDX-License-Identifier: Apache-2.0
"""The types a user's type checker sees: mypy run on a small user script must infer
each target's array type from ``convert``'s target name, and report a misspelt
target name, a misspelt function and a misspelt dtype constant (the stubs have no
catch-all ``__getattr__``)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import sysconfig
import typing

import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge._frameworks import ALIASES, FRAMEWORKS

USER_SCRIPT = """\
import numpy as np

import tensorbridge as tb

x = np.arange(3.0)
reveal_type(tb.convert(x, "numpy"))  # line 6
reveal_type(tb.convert(x, to="tb"))
reveal_type(tb.convert(x, "mlx"))
plan = tb.explain(x, "torch")
reveal_type(plan)  # line 10
reveal_type(plan.shares_memory)
tb.convert(x, "torhc")
tb.explain(x, to="jaxx")
tb.explian(x, "torch")
tb.flaot32  # line 15
name: tb.TargetName = "jax"
tb.convert(x, name)
d: tb.DType = tb.float32
reveal_type(tb.asarray([1.0]))
"""

# The heavy frameworks' own annotations are not followed (their types are Any here):
# the check stays a few seconds; MLX's small stubs show a framework's type is used.
MYPY_CONFIG = """\
[mypy]
strict = True
[mypy-torch.*,jax.*,jaxlib.*,paddle.*,tensorflow.*,cupy.*,pyarrow.*,tvm_ffi.*,array_api_strict.*]
follow_imports = skip
"""


def test_target_name_lists_every_framework_and_alias():
    assert set(typing.get_args(tb.TargetName)) == set(FRAMEWORKS) | set(ALIASES)


@needs("numpy")
def test_mypy_reads_a_user_script_as_a_user_would(tmp_path):
    pytest.importorskip("mypy")
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG)
    env = dict(os.environ)
    package_root = pathlib.Path(tb.__file__).resolve().parent.parent
    installed = {pathlib.Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    if package_root not in installed:  # an editable install: mypy cannot follow its finder
        env["MYPYPATH"] = str(package_root)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-incremental", "user.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout
    assert run.returncode == 1, out + run.stderr  # errors found, and mypy did not crash
    lines: dict[int, str] = {}
    for line in out.splitlines():
        if line.startswith("user.py:"):
            lines.setdefault(int(line.split(":")[1]), line)  # (the first: the error)
    assert 'Revealed type is "numpy.ndarray' in lines[6]
    assert 'Revealed type is "tensorbridge._core.Tensor"' in lines[7]
    try:
        import mlx.core  # noqa: F401
    except ModuleNotFoundError:
        assert 'Revealed type is "Any"' in lines[8]
    else:
        assert 'Revealed type is "mlx.core.array"' in lines[8]
    assert 'Revealed type is "tensorbridge._convert.Plan"' in lines[10]
    assert 'Revealed type is "bool"' in lines[11]
    assert 'No overload variant of "convert"' in lines[12]
    assert "Literal['jaxx']" in lines[13] and "error" in lines[13]
    assert 'has no attribute "explian"' in lines[14]
    assert 'has no attribute "flaot32"' in lines[15]
    assert 'Revealed type is "tensorbridge._core.Tensor"' in lines[19]
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert all(e.startswith("user.py:") for e in errors), out  # none in our stubs
    assert [int(e.split(":")[1]) for e in errors] == [12, 13, 14, 15], out  # nothing else
