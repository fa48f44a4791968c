# SPDX-License-Identifier: Apache-2.0
"""tensorbridge.testing.check_consumer: each check fails on a consumer that breaks its
rule, and tensorbridge's own consumer passes every check."""

from __future__ import annotations

import numpy as np
import pytest
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
    (s.calls_deleter_twice, "consumer.deleter_once"),
    (s.never_deletes, "consumer.deleter_once"),
    (s.reads_after_free, "consumer.read_after_free"),
    (s.deletes_without_renaming, "consumer.read_after_free"),
    (s.ignores_copy, "consumer.copy.true"),
    (s.copies_anyway, "consumer.copy.false"),
    (s.refuses_its_device, "consumer.device_argument"),
    (s.bfloat16_as_uint16, "consumer.dtypes.low_precision"),
    (s.uint16_labelled_bfloat16, "consumer.dtypes"),
    (s.wrong_values, "consumer.basic"),
    (s.garbles_versioned_only, "consumer.versioned_only"),
    (s.refuses_null_data, "consumer.size0_null_data"),
    (s.takes_used, "consumer.raw_capsule_twice"),
    (s.zero_strides_as_zeros, "consumer.zero_strides"),
    (s.drops_stride_signs, "consumer.negative_strides"),
    (s.passes_stream_to_cpu, "consumer.cpu_stream"),
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


def test_a_consumer_that_never_asks_max_version_is_warned_twice():
    report = tbt.check_consumer(s.legacy_only)
    assert report["consumer.asks_versioned"].status == "warn", str(report)
    # It gets legacy capsules only: whether it honours READ_ONLY cannot be seen.
    assert report["consumer.read_only"].status == "warn", str(report)
    assert "never passed max_version" in report["consumer.read_only"].detail
    assert report.ok, str(report)


def test_a_consumer_looking_dlpack_up_on_the_type_is_not_blamed():
    report = tbt.check_consumer(s.via_type)
    assert report["consumer.used_capsule"].status == "pass", str(report)


def test_a_result_in_a_reference_cycle_is_freed_before_the_deleter_is_counted():
    report = tbt.check_consumer(s.cyclic_result)
    for check in ("consumer.deleter_once", "consumer.raw_capsule_twice"):
        assert report[check].status == "pass", str(report)


def test_a_crash_fails_the_probe_and_the_run_goes_on():
    report = tbt.check_consumer(s.aborts_on_negative_strides)
    assert report["consumer.negative_strides"].status == "fail"
    assert "SIGABRT" in report["consumer.negative_strides"].detail
    assert report["consumer.malformed"].status == "pass"


def test_the_crash_is_explained_by_the_message_not_the_last_frames():
    report = tbt.check_consumer(s.aborts_with_a_message)
    detail = report["consumer.negative_strides"].detail
    assert "SIGABRT" in detail
    assert "what():  negative strides are not supported" in detail
    assert "frame #" not in detail


def test_a_crash_among_several_probes_of_a_check_names_its_case():
    report = tbt.check_consumer(s.aborts_on_malformed_ndim)
    result = report["consumer.malformed"]
    assert result.status == "fail"
    assert result.detail.startswith("consumer.malformed[ndim -1]: crashed the process")


def test_a_consumer_of_1d_tensors_only_is_graded_on_1d_tensors():
    report = tbt.check_consumer(s.one_d_only)
    assert report["consumer.ndim"].status == "warn", str(report)
    assert report.ok, str(report)
    assert report["consumer.negative_strides"].detail == "right values, shared memory"


def test_a_consumer_without_the_2023_keywords_is_warned():
    report = tbt.check_consumer(s.no_retry)
    for check in ("consumer.copy.true", "consumer.copy.false", "consumer.device_argument"):
        assert report[check].status in ("warn", "skip"), str(report)
    assert "does not take copy=" in report["consumer.copy.true"].detail


def test_a_hang_fails_the_probe():
    report = tbt.check_consumer(s.hangs_on_zero_strides, timeout=3)
    assert "hung" in report["consumer.zero_strides"].detail
    assert report["consumer.device"].status == "pass"
