# SPDX-License-Identifier: Apache-2.0
"""Session-wide test set-up."""

from __future__ import annotations

import importlib.util
import warnings


def pytest_configure(config):
    # PaddlePaddle crashes the process when it is imported after TensorFlow, and
    # the whole suite runs in one process in whatever order the tests come: when
    # both are installed, paddle is imported first, before any test module.
    if importlib.util.find_spec("paddle") and importlib.util.find_spec("tensorflow"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its import-time chatter (no ccache, ...)
            import paddle  # noqa: F401
