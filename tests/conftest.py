# SPDX-License-Identifier: Apache-2.0
"""Session-wide test set-up: the ``needs`` mark (tests/needs.py) and the import order."""

from __future__ import annotations

import signal

import pytest
from needs import check_marks, import_paddle_first


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "needs(*names): run only where these frameworks import; skip naming the missing "
        "one otherwise (tests/needs.py)",
    )
    # PaddlePaddle crashes the process when it is imported after TensorFlow: when both
    # are installed, paddle is imported here, before any test module.
    import_paddle_first()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # Before the fixtures: a test whose framework is missing does not set them up.
    check_marks(item)


@pytest.fixture
def ctrl_c():
    """Ctrl-C raises KeyboardInterrupt in this test, as in a user's program: pytest-xdist's
    workers ignore SIGINT (the controller handles it), and ``_thread.interrupt_main`` or
    a SIGINT to an ignoring process does nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
