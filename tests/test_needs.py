# SPDX-License-Identifier: Apache-2.0
"""The tests' own ``needs`` mark and ``framework`` function (tests/needs.py): a missing
framework skips with its name, a present one runs, a typo is an error, and paddle is
never imported after tensorflow."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from needs import OPTIONAL, check_marks, framework, module_name, needs

from tensorbridge._frameworks import FRAMEWORKS


class _Item:
    """What check_marks reads of a test item: its marks."""

    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [m.mark for m in marks]

    def iter_markers(self, name: str):
        return (m for m in self.marks if m.name == name)


def test_names_are_the_registrys_and_its_modules():
    assert module_name("mlx") == FRAMEWORKS["mlx"].module_name == "mlx.core"
    assert module_name("torch") == "torch"
    assert module_name("jax.numpy") == "jax.numpy"  # a module of a framework
    assert module_name("ml_dtypes") == "ml_dtypes" and "ml_dtypes" in OPTIONAL


@pytest.mark.parametrize("name", ["torchh", "jaxx.numpy", "scipy"])
def test_unknown_names_are_errors_not_skips(name):
    with pytest.raises(ValueError, match=f"needs\\('{name}'\\): neither a framework"):
        needs(name)
    with pytest.raises(ValueError, match="neither a framework"):
        framework(name)


def test_needs_takes_a_name():
    with pytest.raises(TypeError, match="at least one"):
        needs()


def test_a_missing_module_skips_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import raises ModuleNotFoundError
    with pytest.raises(pytest.skip.Exception, match="needs ml_dtypes: "):
        framework("ml_dtypes")
    with pytest.raises(pytest.skip.Exception, match="needs ml_dtypes: "):
        check_marks(_Item(needs("numpy", "ml_dtypes")))


def test_a_present_module_is_returned_and_runs():
    assert framework("numpy") is np
    assert check_marks(_Item(needs("numpy"), needs("tensorbridge"))) is None


@needs("numpy")
def test_a_marked_test_runs_where_its_framework_is():
    assert "numpy" in sys.modules


def test_paddle_after_tensorflow_fails_instead_of_crashing(monkeypatch):
    monkeypatch.delitem(sys.modules, "paddle", raising=False)
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    with pytest.raises(pytest.fail.Exception, match="paddle cannot be imported after tensorflow"):
        framework("paddle")
    assert "paddle" not in sys.modules
