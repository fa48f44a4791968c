# SPDX-License-Identifier: Apache-2.0
"""The tensorbridge command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge._frameworks import FRAMEWORKS

#: What a plain `pip install tensorbridge` lacks: every other framework, and ml_dtypes.
MISSING = sorted(
    {m for f in FRAMEWORKS.values() for m in f.modules} - {"numpy", "tensorbridge"} | {"ml_dtypes"}
)
# Run the CLI as if only NumPy were installed: importing any other framework fails.
ONLY_NUMPY = textwrap.dedent(
    """
    import sys
    class Block:
        blocked = set(MISSING)
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.blocked:
                raise ImportError(f"{name} is not installed (blocked by the test)")
            return None
    sys.meta_path.insert(0, Block())
    from tensorbridge._cli import main
    sys.exit(main(sys.argv[1:]))
    """
).replace("MISSING", repr(MISSING))


def cli(*args, only_numpy=False, timeout=600):
    command = (
        [sys.executable, "-c", ONLY_NUMPY] if only_numpy else [sys.executable, "-m", "tensorbridge"]
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    return result


def test_matrix_with_only_numpy_installed():
    result = cli(only_numpy=True)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    frameworks = next(line for line in out.splitlines() if line.startswith("frameworks:"))
    assert frameworks.split(":")[1].split()[0] == "numpy" and "," not in frameworks
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.startswith(("numpy ", "tensorbridge "))
    }
    assert rows["numpy"][1] == "S"  # numpy -> numpy, native: zero-copy
    assert "8 exchanges in" in out  # 2 producers x 2 consumers x 2 routes
    # Without ml_dtypes (a plain `pip install .`) bfloat16/float8 values cannot be made:
    # the sweep says so instead of failing.
    assert "not tested: bfloat16" in out and "pip install ml-dtypes" in out
    coverage = next(line for line in out.splitlines() if line.startswith("dtypes "))
    assert "14/14 · 14/14" in coverage  # the 14 standard dtypes, all intact
    assert "Warning" not in result.stderr


def test_matrix_json():
    result = cli("--json", "--frameworks", "numpy,torch", "--no-timing")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dlpack"] == [1, 3]
    assert set(data["frameworks"]) == {"numpy", "torch", "tensorbridge"}
    exchanges = {(e["producer"], e["consumer"], e["route"]): e for e in data["exchanges"]}
    assert len(exchanges) == 3 * 3 * 2
    for route in ("native", "convert"):
        e = exchanges[("numpy", "torch", route)]
        assert e["status"] == "zero-copy" and e["write_through"] is True
    assert exchanges[("tensorbridge", "tensorbridge", "native")]["status"] == "zero-copy"
    assert data["dtypes"]["numpy"]["bfloat16"] == {"native": False, "convert": True}
    assert data["dtypes"]["torch"]["float8_e4m3fn"] == {"native": True, "convert": True}


def test_matrix_dtypes_and_markdown():
    result = cli("--dtypes", "--frameworks", "numpy", "--no-timing")
    assert result.returncode == 0, result.stderr
    assert "float8_e4m3fn" in result.stdout and "Every dtype" in result.stdout
    md = cli("--markdown", "--frameworks", "numpy", "--no-timing").stdout
    assert md.startswith("# Compatibility")
    assert "## Quirks tensorbridge handles" in md and "### torch" in md
    assert "| producer \\ consumer |" in md


def test_unknown_framework_is_an_error():
    result = cli("--frameworks", "numpy,caffe")
    assert result.returncode == 2 and "unknown framework(s) caffe" in result.stderr


def test_frameworks_take_the_names_convert_takes_and_report_what_is_missing():
    result = cli("--frameworks", "np,paddle,cupy", "--no-timing", only_numpy=True)
    assert result.returncode == 1, result.stderr  # the matrix, but not all of it
    assert "paddle is not installed here (pip install paddlepaddle); left out" in result.stderr
    assert "cupy is left out: it needs a GPU" in result.stderr
    frameworks = next(line for line in result.stdout.splitlines() if line.startswith("frameworks:"))
    assert frameworks.split(":")[1].split()[0] == "numpy"


def test_conflicting_outputs_are_refused():
    result = cli("--json", "--markdown")
    assert result.returncode == 2 and "not allowed with argument" in result.stderr


def test_a_closed_pipe_ends_quietly():
    command = (
        f'"{sys.executable}" -m tensorbridge --frameworks numpy --no-timing --dtypes | head -1'
    )
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=600
    )
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


def test_version():
    result = cli("--version")
    assert result.stdout.startswith("tensorbridge ") and "(DLPack 1.3)" in result.stdout


def test_inspect_numpy_expression():
    result = cli("inspect", "np.arange(6)[::2]", only_numpy=True)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "type:         numpy.ndarray" in out
    assert "__dlpack__(max_version=(1, 3)):" in out and "capsule:      dltensor_versioned" in out
    assert "dtype:        int64 (code 0, bits 64, lanes 1)" in out
    assert "strides:      (2,)  (elements)" in out and "shape:        (3,)" in out
    assert "__dlpack__(legacy ()):" in out and "capsule:      dltensor\n" in out


@needs("torch")
def test_inspect_torch_and_read_only():
    result = cli("inspect", "torch.arange(4)[::2]")
    assert result.returncode == 0, result.stderr
    assert "C exchange API: __dlpack_c_exchange_api__" in result.stdout
    ro = cli("inspect", "tb.asarray(b'12345678', dtype='uint8')", only_numpy=True).stdout
    assert "flags:        1 READ_ONLY" in ro
    assert "fails: BufferError: __dlpack__(): cannot export a read-only tensor" in ro


def test_inspect_errors():
    result = cli("inspect", "1 +", only_numpy=True)
    assert result.returncode == 2 and "evaluating '1 +' failed: SyntaxError" in result.stderr
    result = cli("inspect", "[1, 2]", only_numpy=True)
    assert result.returncode == 1 and "no DLPack export" in result.stdout


@pytest.mark.parametrize("argv", [["-m", "tensorbridge", "--version"]])
def test_command_line_prints_the_version(argv):
    out = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.startswith(f"tensorbridge {tb.__version__} (DLPack 1.3)")
