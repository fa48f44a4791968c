# SPDX-License-Identifier: Apache-2.0
"""tensorbridge.testing.check_producer: each check fails on a producer that breaks its
rule, and tensorbridge's own producer passes every check."""

from __future__ import annotations

import json

import pytest
from needs import needs
from testing import subjects as s

import tensorbridge.testing as tbt
from tensorbridge.testing._isolate import Factory


def test_tensorbridge_passes_every_check_isolated():
    report = tbt.check_producer(s.tensorbridge_tensor)
    assert report.ok, str(report)
    assert {r.status for r in report.results} == {"pass"}, str(report)
    assert report.name == "testing.subjects:tensorbridge_tensor"
    tbt.assert_conformant_producer(s.tensorbridge_tensor, isolate=False)


def test_numpy_graded():
    report = tbt.check_producer(s.numpy_array)
    # What NumPy 2.4 shows: no C exchange table, non-NULL data for size 0.
    assert report.ok, str(report)
    assert report["producer.c_exchange_api"].status == "skip"
    assert report["producer.struct.data"].status in ("pass", "warn")


BROKEN = [
    (s.DeviceNone, "producer.dlpack_device"),
    (s.AlwaysVersioned, "producer.max_version.none"),
    (s.NoMaxVersion, "producer.max_version.1"),
    (s.NoStream, "producer.stream"),
    (s.NoDlDevice, "producer.dl_device"),
    (s.CopyIgnored, "producer.copy.true"),
    (s.CopyFalseCopies, "producer.copy.false"),
    (s.SameCapsule, "producer.fresh_capsule"),
    (s.WrongValues, "producer.values"),
    (s.DropsReadOnly, "producer.read_only"),
    (s.NullFunctionTable, "producer.c_exchange_api"),
    (s.WrongNameTable, "producer.c_exchange_api"),
]

BROKEN_STRUCT = [
    (s.NullStrides, "producer.struct.strides"),
    (s.Version2, "producer.struct.version"),
    (s.UnknownDType, "producer.struct.dtype"),
    (s.WrongDevice, "producer.struct.device"),
    (s.NegativeNdim, "producer.struct.ndim_shape"),
    (s.NullData, "producer.struct.data"),
    (s.UnknownFlags, "producer.struct.flags"),
    (s.VersionedInLegacy, "producer.struct.kind"),
    (s.Leaky, "producer.deleter.unconsumed"),
    (s.Leaky, "producer.deleter.once"),
    (s.AnyMajorVersioned, "producer.max_version.0"),
    (s.HugeByteOffset, "producer.struct.byte_offset"),
    (s.CopiesSilently, "producer.copy.false"),
    (s.Fp4TwoLanes, "producer.struct.dtype"),
    (s.TableV2Only, "producer.c_exchange_api"),
]


@pytest.mark.parametrize(("cls", "check"), BROKEN, ids=[c for _, c in BROKEN])
def test_check_fails_on_a_producer_breaking_it(cls, check):
    report = tbt.check_producer(s.wrapped(cls), isolate=False)
    assert report[check].status == "fail", str(report)


@pytest.mark.parametrize(("cls", "check"), BROKEN_STRUCT, ids=[c for _, c in BROKEN_STRUCT])
def test_struct_check_fails_on_a_producer_breaking_it(cls, check):
    report = tbt.check_producer(s.float32_only(cls), isolate=False)
    assert report[check].status == "fail", str(report)


def test_a_wrapper_that_breaks_nothing_passes():
    report = tbt.check_producer(s.wrapped(s.Wrapped), isolate=False)
    assert report.ok, str(report)
    # the export holds the Tensor, not the wrapper: the deleter cannot be watched
    assert report["producer.deleter.once"].status == "skip"


def test_assert_lists_every_failure():
    with pytest.raises(AssertionError) as info:
        tbt.assert_conformant_producer(s.float32_only(s.NullData), isolate=False)
    assert "producer.struct.data" in str(info.value)


def test_a_crash_fails_the_probe_and_the_run_goes_on():
    report = tbt.check_producer(s.aborts_on_copy)
    assert report["producer.copy.true"].status == "fail"
    assert "SIGABRT" in report["producer.copy.true"].detail
    assert report["producer.fresh_capsule"].status == "pass"  # a later probe ran


def test_a_crash_while_the_cases_are_read_fails_the_struct_probe():
    report = tbt.check_producer(s.aborts_on_transposed)
    assert report["producer.struct"].status == "fail", str(report)
    assert "SIGABRT" in report["producer.struct"].detail
    assert report["producer.read_only"].status == "pass", str(report)  # a later probe


def test_a_deleter_that_cannot_run_on_another_thread_fails():
    report = tbt.check_producer(s.main_thread_deleter)
    result = report["producer.deleter.no_gil"]
    assert result.status == "fail", str(report)
    assert "SIGABRT" in result.detail
    assert report["producer.deleter.once"].status != "fail", str(report)  # on the main thread


def test_a_pre_1_0_producer_is_asked_without_max_version_where_the_version_is_not_checked():
    report = tbt.check_producer(s.wrapped(s.NoMaxVersion), isolate=False)
    assert report["producer.max_version.1"].status == "fail"
    assert report["producer.stream"].status == "pass", str(report)
    assert report["producer.fresh_capsule"].status == "pass", str(report)


def test_a_hang_fails_the_probe():
    report = tbt.check_producer(s.hangs_on_stream, timeout=3)
    assert report["producer.stream"].status == "fail"
    assert "hung" in report["producer.stream"].detail
    assert report["producer.copy.true"].status == "pass"


def test_a_lambda_runs_in_process_with_a_warning():
    report = tbt.check_producer(lambda: s.tensorbridge_tensor())
    assert report["producer.isolation"].status == "warn"
    assert report.ok


def test_isolate_true_refuses_what_a_child_cannot_find():
    with pytest.raises(ValueError, match=r"isolate=True needs a target .*<lambda>"):
        tbt.check_producer(lambda: s.tensorbridge_tensor(), isolate=True)


def test_report_text_and_json():
    report = tbt.check_producer(s.float32_only(s.NullData), isolate=False, name="nulldata")
    text = str(report)
    assert text.startswith("DLPack producer conformance of nulldata:")
    assert "FAIL  producer.struct.data" in text
    data = json.loads(report.to_json())
    assert data["ok"] is False and data["kind"] == "producer"
    assert {"name", "status", "detail", "clause"} <= set(data["results"][0])


@needs("torch")
def test_torch_graded():
    # both roles in the same children: torch is imported once per child, not twice
    report, consumer = tbt.check_library("testing.subjects:torch_tensor", "torch:from_dlpack")
    # torch 2.13 copies for copy=True without setting IS_COPIED (digest pitfall 47)
    assert report["producer.copy.true"].status == "fail", str(report)
    assert report["producer.c_exchange_api"].status == "pass", str(report)
    # torch.from_dlpack aborts the process on negative strides (pytorch#188023)
    assert consumer["consumer.negative_strides"].status == "fail", str(consumer)
    assert consumer["consumer.basic"].status == "pass", str(consumer)


def test_check_library_grades_both_roles_in_shared_children():
    producer, consumer = tbt.check_library(s.tensorbridge_tensor, "tensorbridge:from_dlpack")
    assert {r.status for r in producer.results} == {"pass"}, str(producer)
    assert {r.status for r in consumer.results} == {"pass"}, str(consumer)
    assert (producer.kind, consumer.kind) == ("producer", "consumer")


def test_a_target_that_kills_the_child_while_built_fails_its_start_only():
    producer, consumer = tbt.check_library(
        s.tensorbridge_tensor, Factory("testing.subjects:abort_now")
    )
    assert producer.ok, str(producer)
    assert [r.name for r in consumer.results] == ["consumer.start"]
    assert "SIGABRT" in consumer["consumer.start"].detail


def test_a_factory_is_built_in_the_child():
    report = tbt.check_producer(Factory("testing.subjects:make_of", ("int16",)))
    assert report.ok, str(report)
    assert report.name == "testing.subjects:make_of('int16',)"
    assert "producer.isolation" not in {r.name for r in report.results}


def test_a_producer_that_always_copies_passes_copy_true():
    # Each copy is freed with its capsule: an address compared after that could be
    # the next copy's.
    report = tbt.check_producer(s.float32_only(s.AlwaysCopies), isolate=False)
    assert report["producer.copy.true"].status == "pass", str(report)
    assert report["producer.copy.false"].status == "warn", str(report)  # refused
    assert report.ok, str(report)


def test_copy_false_compares_with_a_default_export_made_while_it_is_alive():
    report = tbt.check_producer(s.float32_only(s.CopiesSilently), isolate=False)
    assert "differs from a default export's" in report["producer.copy.false"].detail


def test_an_export_owned_through_a_reference_cycle_is_released():
    report = tbt.check_producer(s.float32_only(s.CyclicOwner), isolate=False)
    for check in ("producer.deleter.unconsumed", "producer.deleter.once"):
        assert report[check].status == "pass", str(report)


@pytest.mark.parametrize(
    ("cls", "check", "words"),
    [
        (s.ManyDims, "producer.struct.ndim_shape", "more than tensorbridge reads (64)"),
        (s.NewerMinorFlags, "producer.struct.flags", "defined by its version 1.4?"),
    ],
    ids=["ndim 65", "flags of 1.4"],
)
def test_what_dlpack_allows_but_tensorbridge_cannot_read_is_a_warning(cls, check, words):
    report = tbt.check_producer(s.float32_only(cls), isolate=False)
    assert report[check].status == "warn", str(report)
    assert words in report[check].detail


def test_unknown_flags_of_a_1_3_capsule_fail():
    report = tbt.check_producer(s.float32_only(s.UnknownFlags), isolate=False)
    assert "flag bits 0x400 unknown in 1.3" in report["producer.struct.flags"].detail


def test_an_exchange_table_of_a_newer_major_is_walked_to_its_major_1_table():
    report = tbt.check_producer(s.float32_only(s.TableV2), isolate=False)
    result = report["producer.c_exchange_api"]
    assert result.status == "pass", str(report)
    assert result.detail == "version 2.0 -> 1.3; round trips"


def test_a_table_with_no_major_1_table_fails():
    report = tbt.check_producer(s.float32_only(s.TableV2Only), isolate=False)
    assert "no major-1 table (versions 2.0" in report["producer.c_exchange_api"].detail
