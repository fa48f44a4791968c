# SPDX-License-Identifier: Apache-2.0
"""The exception classes tensorbridge defines.

Each also derives from the built-in exception that code written for the DLPack
standard already catches, so adopting tensorbridge never changes which
``except`` clause runs:

- :class:`NotDLPackError` is an ``AttributeError`` (what the Array API standard
  prescribes for an input without ``__dlpack__``) and a ``TypeError`` (what
  tensorbridge raised before, and what NumPy raises).
- A :class:`ProducerError` is raised when a producer's own ``__dlpack__`` or
  ``__dlpack_device__`` fails; its class also derives from the type of the
  producer's exception (a ``BufferError`` stays a ``BufferError``), and the
  producer's exception is its ``__cause__``.
- :class:`ImportOrderError` is an ``ImportError``: PaddlePaddle cannot be imported
  into a process that has loaded TensorFlow (it crashes).
"""

from __future__ import annotations

__all__ = ["ImportOrderError", "NotDLPackError", "ProducerError", "TensorbridgeError"]


class TensorbridgeError(Exception):
    """Base class of the exceptions tensorbridge defines."""


class NotDLPackError(TensorbridgeError, AttributeError, TypeError):
    """The input has neither ``__dlpack__`` nor ``__dlpack_device__`` (or lacks one)."""


class ProducerError(TensorbridgeError):
    """A producer's ``__dlpack__`` or ``__dlpack_device__`` raised; see ``__cause__``.

    Instances belong to a subclass that also derives from the producer's exception
    type, so ``except BufferError`` still catches a producer's ``BufferError``, and
    keep the original's attributes (a TensorFlow ``OpError``'s ``error_code``, ...).
    """

    _tb_message = ""

    def __str__(self) -> str:
        # Ours, whatever the mixed-in type's __str__ would make of its attributes.
        return self._tb_message or super().__str__()


class ImportOrderError(TensorbridgeError, ImportError):
    """A framework cannot be imported after another one in the same process."""


# Subclasses of ProducerError mixed with the producer's exception type, by type.
_producer_classes: dict[type, type] = {}


def producer_error(exc: BaseException, message: str) -> BaseException:
    """The exception to raise, chained to ``exc``, when a producer's call raised ``exc``.

    ``message`` names the producer and the call. Exceptions that are not the
    producer's to explain (``KeyboardInterrupt``, ``MemoryError``, ...) and types
    that cannot be mixed in come back unchanged.
    """
    base = type(exc)
    if not isinstance(exc, Exception) or isinstance(exc, (MemoryError, ProducerError)):
        return exc
    cls = _producer_classes.get(base)
    if cls is None:
        try:
            cls = type(f"{base.__name__}FromProducer", (ProducerError, base), {})
            cls.__module__ = __name__
        except TypeError:  # a final class or a layout conflict
            cls = ProducerError
        _producer_classes[base] = cls
    text = f"{message}: {base.__name__}: {exc}"
    try:
        new = cls(text)
    except Exception:
        # A constructor with other arguments (TensorFlow's OpError, UnicodeError):
        # made without it, with the original's attributes.
        try:
            new = cls.__new__(cls)
            new.__dict__.update(getattr(exc, "__dict__", {}))
            new.args = (text,)
        except Exception:
            return exc
    new._tb_message = text
    new.__cause__ = exc
    return new
