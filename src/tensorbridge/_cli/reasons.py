# SPDX-License-Identifier: Apache-2.0
"""Why an exchange of the matrix shared, copied or failed, in words.

Shared: what the write test showed. Copied through ``convert``: the plan's own
reasons (`tensorbridge.explain`); through a consumer's own ``from_dlpack``: the
consumer's facts in the registry (it always copies; it shares only aligned memory)
checked against the source. Failed: the exception, whole, on one line, preceded by
what was actually wrong when the raw message does not say it (checked on the
source, not guessed from the message alone)."""

from __future__ import annotations

from typing import Any

from tensorbridge._cli.probes import Probe, capsule_name, pointer

__all__ = ["alignment_of", "copied", "error_text", "failed", "shared"]


def alignment_of(address: int, cap: int = 64) -> int:
    """The largest power of two (up to `cap`) dividing address."""
    return min(cap, address & -address) if address else cap


def shared(producer: type[Probe], consumer: type[Probe], wrote: str | None, seen: bool) -> str:
    """A zero-copy exchange: `wrote` is the side written through ("source" or
    "result"; None: both sides are immutable, so only the address was compared),
    `seen` whether the other side read the write."""
    if wrote is None:
        return "same data address (both sides are immutable: nothing to write through)"
    source, result = f"the {producer.name} source", f"the {consumer.name} result"
    writer, reader = (source, result) if wrote == "source" else (result, source)
    if seen:
        return f"same data address; a write through {writer} was read through {reader}"
    return (
        f"same data address, but a write through {writer} was not seen through {reader} "
        "(one side holds a snapshot of the values)"
    )


def copied(route: str, producer: type[Probe], consumer: type[Probe], source: Any) -> str:
    """Why the consumer's array has memory of its own."""
    if route == "convert":
        from tensorbridge._convert import explain

        try:
            plan = explain(source, consumer.name)  # type: ignore[arg-type]  # (a registry name)
        except Exception as exc:  # what convert did is known; only the words are missing
            return f"convert copied (explain could not say why: {error_text(exc)})"
        if plan.copies:
            return "convert copies: " + "; ".join(plan.copies)
        return f"convert copied, though its plan ({plan.path}) expected to share memory"
    framework = consumer.framework()
    call = consumer.native()
    if framework.always_copies:
        return f"{call} always copies into {consumer.name}'s own memory"
    address = pointer(source)
    if framework.alignment and address is not None and address % framework.alignment:
        return (
            f"{call} shares only {framework.alignment}-byte aligned memory; this "
            f"{producer.name} array is {alignment_of(address)}-byte aligned"
        )
    return (
        f"{call} copied {producer.name}'s array (its result has memory of its own; "
        "neither the export nor the consumer's known rules say why)"
    )


def error_text(exc: BaseException) -> str:
    """An exception, whole, on one line: ``Type: message``."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def failed(
    route: str, producer: type[Probe], consumer: type[Probe], source: Any, exc: BaseException
) -> str:
    """Why an exchange raised: the cause, when the raw message hides it, then the
    message itself."""
    raw = error_text(exc)
    why = _cause(route, producer, consumer, source, raw)
    return f"{why} ({raw})" if why else raw


def _cause(route: str, producer: type[Probe], consumer: type[Probe], source: Any, raw: str) -> str:
    if route != "native":
        return ""  # convert's errors say what was wrong and what to do themselves
    call = consumer.native()
    if "PyCapsule_GetPointer called with incorrect name" in raw:
        # The consumer read the capsule under another name than the producer gave it.
        asked = capsule_name(source, max_version=(1, 3))
        if asked == "dltensor":
            return (
                f"{call} asks for max_version=(1, 3) and reads only versioned "
                f'"dltensor_versioned" capsules, but {producer.name} answers with a legacy '
                '"dltensor" capsule (the Array API standard allows that: a consumer must '
                "check which kind it got even when it passes max_version)"
            )
        if asked == "dltensor_versioned":
            return (
                f'{call} reads the capsule as a legacy "dltensor", but {producer.name} '
                'gives a versioned "dltensor_versioned" capsule when asked for '
                "max_version (the consumer asked for a version it does not read)"
            )
        return ""
    try:
        device = source.__dlpack_device__()
        device_id = device[1]
    except Exception:
        return ""
    if not isinstance(device_id, int) and type(device_id).__name__ in raw:
        return (
            f"{producer.name}'s __dlpack_device__() gives the device id {device_id!r} where "
            f"DLPack specifies an int, and {call} passes it on to its device lookup as it is"
        )
    return ""
