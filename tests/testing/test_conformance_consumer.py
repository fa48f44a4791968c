# SPDX-License-Identifier: Apache-2.0
"""tensorbridge.testing.check_consumer: each check fails on a consumer that breaks its
rule, and tensorbridge's own consumer passes every check."""

from __future__ import annotations

import numpy as np
import pytest
from needs import needs
from testing import subjects as s

import tensorbridge as tb
import tensorbridge.testing as tbt


def test_tensorbridge_passes_every_check_isolated():
    report = tbt.check_consumer(tb.from_dlpack)
    assert {r.status for r in report.results} == {"pass"}, str(report)


def test_numpy_graded():
    report = tbt.check_consumer(np.from_dlpack)
    # NumPy 2.4 refuses CUDA and malformed tensors with RuntimeError, not BufferError,
    # and takes no raw capsules.
    assert report.ok, str(report)
    assert report["consumer.raw_capsule_twice"].status == "skip"
    assert report["consumer.basic"].status == "pass"


BROKEN = [
    (s.no_retry, "consumer.legacy_producer"),
    (s.versioned_names_only, "consumer.legacy_answer"),
    (s.versioned_names_only, "consumer.null_strides"),
    (s.ignores_byte_offset, "consumer.byte_offset"),
    (s.deletes_without_renaming, "consumer.capsule_protocol"),
    (s.cuda_as_cpu, "consumer.device"),
    (s.takes_used, "consumer.used_capsule"),
    (s.accepts_malformed, "consumer.malformed"),
]


@pytest.mark.parametrize(("fn", "check"), BROKEN, ids=[c for _, c in BROKEN])
def test_check_fails_on_a_consumer_breaking_it(fn, check):
    report = tbt.check_consumer(fn)  # in child processes: faster than this busy one
    assert report[check].status == "fail", str(report)


def test_assert_lists_every_failure():
    with pytest.raises(AssertionError, match=r"consumer\.malformed: ndim -1: accepted"):
        tbt.assert_conformant_consumer(s.accepts_malformed)


def test_ignoring_read_only_is_a_warning():
    report = tbt.check_consumer(s.ignores_read_only)
    assert report["consumer.read_only"].status == "warn", str(report)


def test_a_crash_fails_the_probe_and_the_run_goes_on():
    report = tbt.check_consumer(s.aborts_on_negative_strides)
    assert report["consumer.negative_strides"].status == "fail"
    assert "SIGABRT" in report["consumer.negative_strides"].detail
    assert report["consumer.malformed"].status == "pass"


def test_a_hang_fails_the_probe():
    report = tbt.check_consumer(s.hangs_on_zero_strides, timeout=3)
    assert "hung" in report["consumer.zero_strides"].detail
    assert report["consumer.device"].status == "pass"


@needs("torch")
def test_torch_graded():
    report = tbt.check_consumer("torch:from_dlpack")
    # torch.from_dlpack aborts the process on negative strides (pytorch#188023)
    assert report["consumer.negative_strides"].status == "fail", str(report)
    assert report["consumer.basic"].status == "pass", str(report)
