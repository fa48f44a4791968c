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
- :class:`DeviceError` is a ``BufferError`` (what the DLPack standard raises when
  an export cannot be made as asked): the data is not on the device asked for, and
  tensorbridge moves no data between devices.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs import time; annotations are strings
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "NO_MOVES",
    "DeviceError",
    "ImportOrderError",
    "NotDLPackError",
    "ProducerError",
    "TensorbridgeError",
    "said_by",
]


class TensorbridgeError(Exception):
    """Base class of the exceptions tensorbridge defines."""


class NotDLPackError(TensorbridgeError, AttributeError, TypeError):
    """The input has neither ``__dlpack__`` nor ``__dlpack_device__`` (or lacks one)."""


class ProducerError(TensorbridgeError):
    """A producer's ``__dlpack__`` or ``__dlpack_device__`` raised; see ``__cause__``.

    Instances belong to a subclass that also derives from the producer's exception
    type, so ``except BufferError`` still catches a producer's ``BufferError``, and
    carry the original's instance attributes (a TensorFlow ``OpError``'s
    ``error_code``, ...). They pickle (across processes the class is made anew).
    """

    _tb_message = ""
    _tb_base: type | None = None

    def __str__(self) -> str:
        # Ours, whatever the mixed-in type's __str__ would make of its attributes.
        return self._tb_message or super().__str__()

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self._tb_base is None:
            return super().__reduce__()
        state = dict(self.__dict__)
        state.update(_builtin_attributes(self))
        return (_rebuild, (self._tb_base, self._tb_message), state)


class ImportOrderError(TensorbridgeError, ImportError):
    """A framework cannot be imported after another one in the same process."""


#: What every refused device move says (after what was asked).
NO_MOVES = (
    "tensorbridge moves no data between devices: move it with a framework that can first "
    "(torch's .to(), cupy.asarray, jax.device_put)"
)


class DeviceError(TensorbridgeError, BufferError):
    """The data is on another device than the one asked for, and cannot be moved
    there: tensorbridge moves no data between devices, and the producer (if it was
    asked, with ``dl_device=``) refused; its refusal is the ``__cause__``. Raised by
    `asarray`, `from_dlpack`, `convert`, `explain` and `Tensor.to` alike."""


# Subclasses of ProducerError mixed with the producer's exception type, by type
# (None: that type cannot be mixed in), the most recently used last. Bounded: a
# producer that raises a new exception type on every call (one made by type(), a
# class defined in a function) grew the process by 163 MB over 50,000 calls, and a
# weak key would not help (the mixed class holds its base). An evicted type gets a
# new class when it is raised again; except clauses name the base or ProducerError.
_producer_classes: dict[type, type | None] = {}
PRODUCER_CLASSES_KEPT = 256


def _mixed_class(base: type) -> type | None:
    cls: type | None
    try:
        # A hit moves the entry to the end, so the types raised often stay.
        cls = _producer_classes.pop(base)
        _producer_classes[base] = cls
        return cls
    except KeyError:
        pass
    try:
        cls = type(f"{base.__name__}FromProducer", (ProducerError, base), {})
        cls.__module__ = __name__
    except TypeError:  # a final class or a layout conflict
        cls = None
    while len(_producer_classes) >= PRODUCER_CLASSES_KEPT:
        try:  # (another thread may change the dict between the two calls)
            del _producer_classes[next(iter(_producer_classes))]
        except (KeyError, RuntimeError, StopIteration):
            break
    _producer_classes[base] = cls
    return cls


#: Attributes that built-in exception types keep outside ``__dict__`` (OSError,
#: UnicodeError, StopIteration, AttributeError, ImportError, SyntaxError).
_BUILTIN_ATTRIBUTES = (
    "errno",
    "strerror",
    "filename",
    "filename2",
    "encoding",
    "object",
    "start",
    "end",
    "reason",
    "value",
    "name",
    "obj",
    "path",
    "msg",
    "lineno",
    "offset",
    "text",
)


def _builtin_attributes(exc: BaseException) -> dict[str, object]:
    found = {}
    for attribute in _BUILTIN_ATTRIBUTES:
        if attribute not in getattr(exc, "__dict__", {}):
            try:
                found[attribute] = getattr(exc, attribute)
            except AttributeError:
                continue
    return found


def _make(cls: type[ProducerError], base: type, text: str) -> BaseException:
    """An instance of cls without calling base's constructor, which may take other
    arguments (TensorFlow's OpError, UnicodeError)."""
    new = cls.__new__(cls)
    BaseException.__init__(new, text)
    new._tb_message = text
    new._tb_base = base
    return new


def _rebuild(base: type, text: str) -> BaseException:
    cls = _mixed_class(base)
    return _make(cls, base, text) if cls is not None else ProducerError(text)


def producer_error(exc: BaseException, message: str) -> BaseException:
    """The exception to raise, chained to ``exc``, when a producer's call raised ``exc``.

    ``message`` names the producer and the call. Exceptions that are not the
    producer's to explain (``KeyboardInterrupt``, ``MemoryError``, ...) and those
    whose type cannot be mixed in come back unchanged.
    """
    base = type(exc)
    if not isinstance(exc, Exception) or isinstance(exc, (MemoryError, ProducerError)):
        return exc
    cls = _mixed_class(base)
    if cls is None:
        return exc
    try:
        new = _make(cls, base, f"{message}: {base.__name__}: {exc}")
        new.__dict__.update(getattr(exc, "__dict__", {}))
        for attribute, value in _builtin_attributes(exc).items():
            try:
                setattr(new, attribute, value)
            except (AttributeError, TypeError):
                continue
    except Exception:
        return exc
    new.__cause__ = exc
    return new


#: The public functions whose names begin tensorbridge's messages.
_OURS = frozenset({"asarray", "from_dlpack", "to_dlpack", "convert", "explain"})


def said_by(exc: BaseException, api: str) -> BaseException:
    """Make ``exc``'s message begin with ``api`` (``"convert()"``), the function the
    user called: a message of another tensorbridge function (``asarray(): ...`` read
    inside ``convert``) is renamed, any other (a framework's, Python's) prefixed.

    In place, so the exception keeps its type, attributes, cause and traceback. An
    exception whose message is not its one string argument is left as it is."""
    if isinstance(exc, ProducerError):
        message = exc._tb_message
    elif len(exc.args) == 1 and isinstance(exc.args[0], str):
        message = exc.args[0]
    else:
        return exc
    head, colon, rest = message.partition("(): ")
    if colon and head in _OURS:
        if f"{head}()" == api:
            return exc
        message = f"{api}: {rest}"
    else:
        message = f"{api}: {message}"
    if isinstance(exc, ProducerError):
        exc._tb_message = message
        return exc
    before = exc.args
    exc.args = (message,)
    if isinstance(exc, ImportError):
        exc.msg = message  # (what its __str__ shows)
    if message not in str(exc):  # its __str__ is not its argument: leave it
        exc.args = before
    return exc
