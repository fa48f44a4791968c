# SPDX-License-Identifier: Apache-2.0
"""The package's front door: names, import weight."""

from __future__ import annotations

import json
import subprocess
import sys

import tensorbridge as tb
from tensorbridge._frameworks import FRAMEWORKS

#: Every framework's modules (NumPy's too) and ml_dtypes: none may come with the import.
HEAVY = {m for f in FRAMEWORKS.values() if f.name != "tensorbridge" for m in f.modules} | {
    "ml_dtypes"
}


def test_all_names_resolve():
    for name in tb.__all__:
        assert hasattr(tb, name), name


def test_core_api_is_exported():
    for name in ["Tensor", "DType", "Device", "DLDeviceType", "from_dlpack", "to_dlpack"]:
        assert name in tb.__all__


def test_import_brings_in_no_framework():
    code = (
        "import sys, json, tensorbridge as tb; "
        "t = tb.float32; "
        "print(json.dumps(sorted(m for m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    loaded = set(json.loads(out))
    assert not loaded & HEAVY, loaded & HEAVY


def test_version_and_dlpack_version():
    assert isinstance(tb.__version__, str) and tb.__version__.count(".") >= 2
    assert tb.DLPACK_VERSION == (1, 3)
