# SPDX-License-Identifier: Apache-2.0
"""The `Framework` base class: what a bridge target's consumer can take, as data.

A subclass per framework (one module each in this package) fills in the facts:
dtypes, layouts, byte offsets, alignment, whether its arrays can be read-only.
The planner (`tensorbridge._convert`) plans from these facts and the hooks below
alone (docs/design.md, "Bridges"), so `explain` can say what will happen without
doing it. A framework is imported only when a conversion needs it (`module`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from tensorbridge import _core
from tensorbridge._core import Tensor
from tensorbridge._devices import Device
from tensorbridge._dtypes import DTYPES, DType
from tensorbridge._errors import ImportOrderError
from tensorbridge._known_types import check_import_order, loaded

__all__ = [
    "ALL_DTYPES",
    "FLOAT8",
    "ML_DTYPES",
    "STANDARD",
    "SUBBYTE",
    "Framework",
    "TensorInfo",
    "folded",
    "is_compact",
    "is_packed",
    "writable_view",
]

ALL_DTYPES = frozenset(DTYPES)
#: By DLPack type code: bfloat16 is 4, the float8 types 7-14, float6/float4 15-17.
FLOAT8 = frozenset(n for n, d in DTYPES.items() if 7 <= d.code <= 14)
SUBBYTE = frozenset(n for n, d in DTYPES.items() if 15 <= d.code <= 17)
ML_DTYPES = FLOAT8 | SUBBYTE | {"bfloat16"}
STANDARD = ALL_DTYPES - ML_DTYPES


class TensorInfo(Protocol):
    """What the planner's hooks read of a source: a `Tensor`, or the metadata of a
    capsule that `explain` must not consume."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def device(self) -> Device: ...
    @property
    def readonly(self) -> bool: ...
    def data_ptr(self) -> int: ...
    def is_contiguous(self) -> bool: ...


class Framework:
    """A bridge target. Subclasses fill in the facts and `make`."""

    # -- identity -------------------------------------------------------------

    #: The name `convert` accepts (also the default module name).
    name: ClassVar[str] = ""
    #: Other names `convert` accepts for it ("tf", "np").
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Module names whose types belong to this framework (for detection).
    modules: ClassVar[tuple[str, ...]] = ()
    #: The module to import; `None` means `name`.
    module_name: ClassVar[str | None] = None
    #: The names users give its modules in code (``np``, ``jnp``), each with the
    #: module it names: (name, module) pairs, the namespace of ``tensorbridge inspect``.
    import_names: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The distribution whose version is its version (None: the module's __version__).
    distribution: ClassVar[str | None] = None
    #: How it is written in tables.
    label: ClassVar[str] = ""
    #: True when it runs only with a GPU (left out of the CPU interoperability matrix).
    needs_gpu: ClassVar[bool] = False

    # -- what its consumer takes ------------------------------------------------

    #: DLPack dtypes it can hold.
    dtypes: ClassVar[frozenset[str]] = ALL_DTYPES
    #: Layouts its consumer takes without a copy.
    negative_strides: ClassVar[bool] = True
    noncompact_strides: ClassVar[bool] = True  # step slices, broadcast (zero) strides
    permuted: ClassVar[bool] = True  # transposed but compact
    #: Whether its consumer honours DLTensor.byte_offset ("fold": we move it into
    #: the data pointer first; "zero": it refuses a nonzero offset, so we fold too).
    byte_offset: ClassVar[str] = "honours"
    #: Alignment in bytes its consumer needs to share memory (0: none).
    alignment: ClassVar[int] = 0
    #: "flag": honours READ_ONLY; "immutable": its arrays cannot be written anyway;
    #: "writable": gives only writable tensors (read-only data must be copied).
    readonly: ClassVar[str] = "writable"
    #: True when it always copies what it imports.
    always_copies: ClassVar[bool] = False
    #: True when it has autograd (requires_grad=).
    autograd: ClassVar[bool] = False
    #: True when it holds only CPU memory.
    host_only: ClassVar[bool] = False
    #: The import path, as `explain` describes it; `fallback_path` when the
    #: framework's C exchange table is missing (older versions).
    path: ClassVar[str] = ""
    fallback_path: ClassVar[str] = ""
    #: Quirks tensorbridge handles for this framework: (what, how it is handled).
    quirks: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The dtypes a cached route may hand over (default: `dtypes`).
    fast_dtypes: ClassVar[frozenset[str] | None] = None
    #: True when a cached route may hand it only C-contiguous data (the planner
    #: sorts out the rest: pyarrow.Array takes only contiguous 1-d data).
    fast_contiguous_only: ClassVar[bool] = False
    #: True when its importer reads only legacy capsules (so a read-only Tensor is
    #: handed over as a writable-flagged view, which such a capsule cannot mark).
    legacy_only: ClassVar[bool] = False
    #: True when its importer reads only versioned capsules (PyArrow raises on a
    #: legacy one): sources that export legacy capsules are not carried to it.
    versioned_only: ClassVar[bool] = False

    # -- routes (docs/design.md, "Routes") ---------------------------------------

    #: True when its own importer (`importer`) may be handed a source object as it
    #: is: it takes every layout and dtype it can hold, and refuses (raises) what it
    #: cannot, so nothing tensorbridge fixes can go wrong there.
    handoff: ClassVar[bool] = False
    #: False when that importer takes dtypes it cannot hold without complaint
    #: (tvm-ffi and complex types): handoffs then check the dtype first, and only
    #: sources whose dtype can be read cheaply (NumPy arrays, exchange tables), or
    #: whose framework holds no other dtypes, are handed over.
    importer_refuses_dtypes: ClassVar[bool] = True
    #: True when that importer reads producers' C exchange tables itself (then a
    #: handoff beats reading the source here and exporting it again): a table
    #: source's managed tensor is checked here and given to it through a table of
    #: ours, instead of asking the source its dtype before a handoff.
    importer_reads_tables: ClassVar[bool] = False
    #: True when its tensors' ``__dlpack__`` gives legacy capsules whatever it is
    #: asked (so a consumer cannot learn whether they are read-only).
    legacy_export: ClassVar[bool] = False
    #: True when its tensors answer the legacy call (``__dlpack__()``, no
    #: max_version) with a DeprecationWarning: cached routes then read them here, as
    #: `from_dlpack` asks, instead of handing them to an importer that asks for a
    #: legacy capsule (`importer_asks_legacy`: MLX, TensorFlow, tvm-ffi), and hand
    #: them to one that falls back to it on a TypeError (NumPy) only where that
    #: cannot come (`counts_nulls`).
    legacy_export_deprecated: ClassVar[bool] = False
    #: True when its arrays have a ``null_count``, and their ``__dlpack__`` raises a
    #: TypeError (PyArrow's ArrowTypeError) exactly when it is not 0.
    counts_nulls: ClassVar[bool] = False
    #: True when its importer asks an object for a legacy capsule
    #: (``__dlpack__()``) first, not only after a TypeError of ``max_version=``.
    importer_asks_legacy: ClassVar[bool] = False
    #: True when its tensors can be lazy bit views whose memory does not hold their
    #: values (PyTorch's negative and conjugate bits): checked before a handoff.
    bit_views: ClassVar[bool] = False
    #: False when its tensors' own exports need tensorbridge's checks (a device id
    #: of None...), so they are never handed to another framework's importer.
    trusted_export: ClassVar[bool] = True

    #: Where the types of its arrays live (``"module.Type"``): convert returns such
    #: an array itself when nothing is asked of it (`owns`), as ``torch.asarray``
    #: and ``numpy.asarray`` do.
    own_types: ClassVar[tuple[str, ...]] = ()

    #: The cached `_core.FastTarget` (False: it has none); see `fast_target`.
    fast_cache: ClassVar[Any] = None

    # -- modules --------------------------------------------------------------

    @classmethod
    def module(cls) -> Any:
        """The framework's module, imported (ImportOrderError when importing it
        would crash the process; ImportError when it is not installed, or when its
        import fails, saying which, with the import's own error)."""
        module_name = cls.module_name or cls.name
        check_import_order(module_name)  # ImportOrderError passes through
        try:
            return importlib.import_module(module_name)
        except ImportError as exc:
            if not cls.installed():
                raise ImportError(
                    f"converting to {cls.name} needs {module_name}, which is not installed "
                    f"(pip install {cls.distribution or cls.name})"
                ) from exc
            raise ImportError(
                f"converting to {cls.name} needs {module_name}, and {cls.import_failure(exc)}"
            ) from exc

    @classmethod
    def available(cls) -> bool:
        try:
            cls.module()
        except ImportError:
            return False
        return True

    @classmethod
    def installed(cls) -> bool:
        """Whether it is installed here, imported or not: its top-level module can be
        found, or its distribution is installed (whose module may then fail to import:
        a broken install is installed, and says so when imported)."""
        import importlib.util

        top = (cls.module_name or cls.name).partition(".")[0]
        try:
            if importlib.util.find_spec(top) is not None:
                return True
        except ModuleNotFoundError:  # (a finder that knows it is absent)
            pass
        except (ImportError, ValueError):  # a finder that fails, a module without a spec
            return True
        if cls.distribution is None:
            return False
        import importlib.metadata

        try:
            importlib.metadata.distribution(cls.distribution)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    @classmethod
    def import_failure(cls, exc: BaseException) -> str:
        """Why importing the installed framework failed, for a message ("importing
        tvm_ffi failed: ImportError: libtvm_ffi.so: cannot open shared object file
        ..."), with the fix where the error is one of the known kinds."""
        module_name = cls.module_name or cls.name
        text = " ".join(str(exc).split())
        said = f"importing {module_name} failed: {type(exc).__name__}: {text}"
        if isinstance(exc, ImportOrderError):
            return str(exc)
        distribution = cls.distribution or cls.name
        if "NumPy 1.x cannot be run in" in text or "numpy.core.multiarray failed" in text:
            return (
                f"{said} ({distribution} was built for NumPy 1.x and this is NumPy 2: "
                f"install a {distribution} built for NumPy 2, or pip install 'numpy<2')"
            )
        if any(
            marker in text
            for marker in (
                "cannot open shared object file",
                "DLL load failed",
                "Library not loaded",
            )
        ):
            return (
                f"{said} (a library it needs is missing: pip install --force-reinstall "
                f"{distribution})"
            )
        return said

    # -- reading its tensors as a source -----------------------------------------

    @classmethod
    def prepare_source(cls, obj: Any, must_copy: Callable[[str], None], notes: list[str]) -> Any:
        """obj as tensorbridge should import it, with what the framework's own export
        gets wrong fixed first. Calls ``must_copy(why)`` before a fix that copies (it
        raises under copy=False) and appends to `notes` what else it did."""
        return obj

    @classmethod
    def unmarked_export(cls, tp: type) -> bool:
        """True when the capsules its objects of type tp export may not say whether
        the data is read-only (legacy capsules; versioned ones without READ_ONLY over
        memory the framework treats as immutable): an importer that reads the flag
        (NumPy) then guesses, so a handoff marks the result as the plan says, or does
        not happen."""
        return cls.legacy_export

    @classmethod
    def reads_in_c(cls, tp: type) -> bool:
        """True when objects of type tp need nothing of `prepare_source`, so a cached
        route may read them in C (those that need a fix always come to the planner)."""
        return not any(
            "prepare_source" in vars(k) for k in cls.__mro__[: cls.__mro__.index(Framework)]
        )

    # -- what the planner asks -------------------------------------------------

    @classmethod
    def unsupported_dtype(cls, dtype_name: str) -> str | None:
        """Why it cannot hold this dtype, or None if it can."""
        if dtype_name in cls.dtypes:
            return None
        return f"{cls.name} has no {dtype_name} type"

    @classmethod
    def layout_problem(cls, t: TensorInfo) -> str | None:
        """Why its consumer cannot take t's layout as it is, or None."""
        if t.size <= 1:
            return None
        strides = [s for s, n in zip(t.strides, t.shape, strict=True) if n != 1]
        if not cls.negative_strides and any(s < 0 for s in strides):
            return f"{cls.name} cannot take negative strides"
        if not cls.noncompact_strides and not is_compact(t):
            return f"{cls.name} takes only compact layouts (no step slices or zero strides)"
        if not cls.permuted and not t.is_contiguous():
            return f"{cls.name} takes only C-contiguous layouts"
        return None

    @classmethod
    def precopy_reasons(cls, t: TensorInfo, readonly: str = "share") -> list[str]:
        """Why t must be copied before this framework can take it (layout,
        alignment; read-only data for writable-only frameworks under
        ``readonly="copy"``)."""
        reasons = []
        layout = cls.layout_problem(t)
        if layout:
            reasons.append(layout)
        if cls.alignment and t.size and t.data_ptr() % cls.alignment:
            ptr = t.data_ptr()
            reasons.append(
                f"{cls.name} shares only {cls.alignment}-byte aligned memory; this is "
                f"{ptr & -ptr}-byte aligned"
            )
        if readonly == "copy" and cls.unprotected(t):
            reasons.append(
                f"{cls.name} tensors are always writable and the data is read-only "
                '(readonly="copy")'
            )
        return reasons

    @classmethod
    def unprotected(cls, t: TensorInfo) -> bool:
        """True when sharing t would give writable access to read-only data (the
        framework cannot mark its tensors read-only, and does not copy anyway)."""
        return bool(t.readonly) and cls.readonly == "writable" and not cls.always_copies

    @classmethod
    def own_copy_reasons(cls, t: TensorInfo) -> list[str]:
        """Why the framework itself will copy what it is given."""
        return [f"{cls.name} always copies"] if cls.always_copies else []

    # -- doing it --------------------------------------------------------------

    @classmethod
    def exchange_type(cls) -> Any:
        """The type whose DLPack C exchange table builds this framework's tensors
        (``managed_tensor_to_py_object_no_sync``), or None."""
        return None

    @classmethod
    def fast_maker(cls) -> Any:
        """For frameworks without an exchange table: what makes the result from a
        Tensor it takes as it is ("identity" for the Tensor itself; a pair of callables
        for 1-d tensors and for the others), or None. By
        default the importer that source objects are handed to (`handoff`), which
        takes our Tensors as it takes any producer."""
        return cls.importer() if cls.handoff else None

    @classmethod
    def hands_off(cls, source: type[Framework], tp: type) -> bool:
        """Whether objects of type tp (of framework `source`) may be handed to its
        importer as they are (see `handoff`; the route adds the checks it lacks)."""
        return cls.handoff

    @classmethod
    def importer(cls) -> Any:
        """Its own DLPack importer of an object (``numpy.from_dlpack``), for handoffs
        (only asked when `handoff` is True)."""
        return None

    @classmethod
    def importer_takes_copy_false(cls) -> bool:
        """True when `importer` takes ``copy=False`` and, given it, never falls back
        to the legacy ``__dlpack__()`` call (NumPy 2.1 and later)."""
        return False

    @classmethod
    def carry_importer(cls) -> Any:
        """What carried routes call with a source they do not read first (a
        `_core._Carrier` standing for it, which checks the capsule the call asks
        for before passing it on): the framework's importer of objects, for targets
        whose own import of a checked capsule is the fastest correct one and that
        have no `capsule_importer` (PyArrow); None: no carried routes. See
        docs/design.md, "Routes"."""
        return None

    @classmethod
    def capsule_importer(cls) -> Any:
        """Its importer of DLPack capsules, which imports a capsule as its importer of
        objects imports an object's ``__dlpack__()`` (a legacy capsule; MLX, tvm-ffi,
        TensorFlow). Trusted sources read through ``__dlpack__`` are then asked here
        as that importer asks them, and the capsule is checked before it is passed
        on (instead of a `carry_importer`). None: no such routes. See
        docs/design.md, "Routes"."""
        return None

    @classmethod
    def current_stream(cls, device: Device) -> int | None:
        """The stream a producer of CUDA/ROCm memory on `device` is asked to order
        its work on when tensorbridge reads the data for this framework: the
        framework's current stream there, as DLPack's ``stream`` value (1 for CUDA's
        legacy default stream), or None when the framework has no stream of its own
        (the producer then synchronises with the legacy default stream)."""
        return None

    @classmethod
    def guard64(cls) -> Any:
        """A callable saying whether 64-bit data may take a cached route now (for
        run-time configuration such as JAX's x64 switch), or None."""
        return None

    @classmethod
    def fast_target(cls) -> Any:
        """A `_core.FastTarget` for this framework (its exchange table, or its
        `fast_maker`), cached; None when it has neither."""
        cached = cls.__dict__.get("fast_cache")
        if cached is None:
            try:
                tp = cls.exchange_type()
            except ImportError:
                return None  # not installed: nothing to cache yet
            maker = cls.fast_maker() if tp is None else None
            cached = False
            if tp is not None or maker is not None:
                try:
                    cached = _core.FastTarget(
                        target_type=tp,
                        dtypes=[DTYPES[n] for n in (cls.fast_dtypes or cls.dtypes)],
                        negative_strides=cls.negative_strides,
                        noncompact=cls.noncompact_strides and not cls.fast_contiguous_only,
                        permuted=cls.permuted and not cls.fast_contiguous_only,
                        offset_ok=cls.byte_offset == "honours",
                        readonly_ok=(cls.readonly != "writable" or cls.always_copies)
                        and not cls.legacy_only,
                        alignment=cls.alignment,
                        maker=maker,
                        importer=cls.importer(),
                        carrier_importer=cls.carry_importer(),
                        capsule_importer=cls.capsule_importer(),
                        guard64=cls.guard64(),
                    )
                except TypeError:
                    cached = False  # no usable table: the Python-level importer
            cls.fast_cache = cached
        return cached or None

    @classmethod
    def import_path(cls) -> str:
        """The path `make` takes here (with this framework's version)."""
        if cls.fallback_path and cls.fast_target() is None:
            return cls.fallback_path
        return cls.path

    @classmethod
    def make(cls, t: Tensor) -> Any:
        """Import t (already made acceptable by the planner) into the framework."""
        raise NotImplementedError

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        """The DLPack dtype name of one of its arrays (the planner checks the result)."""
        return str(obj.dtype).rsplit(".", 1)[-1]

    @classmethod
    def set_requires_grad(cls, obj: Any) -> Any:
        raise ValueError(f"requires_grad=True: {cls.name} has no autograd")

    @classmethod
    def export_problem(cls, obj: Any) -> str | None:
        """Why one of its arrays cannot be exported over DLPack, and what to do (its
        own error says less), or None."""
        return None

    @classmethod
    def owns(cls, obj: Any) -> bool:
        """Whether obj is one of its own arrays (an instance of `own_types`; no
        module is imported: an array of a framework means it is loaded)."""
        for path in cls.own_types:
            module, _, name = path.rpartition(".")
            tp = getattr(loaded(module), name, None)
            if isinstance(tp, type) and isinstance(obj, tp):
                return not overrides_export(type(obj), tp)
        return False

    @classmethod
    def requires_grad_of(cls, obj: Any) -> bool:
        """Whether one of its arrays is recorded by autograd."""
        return False

    @classmethod
    def can_require_grad(cls, obj: Any) -> bool:
        """Whether requires_grad can be set on one of its arrays in place."""
        return cls.autograd


def overrides_export(tp: type, base: type) -> bool:
    """Whether a subclass tp of a framework's array type `base` has a __dlpack__ or
    __dlpack_device__ of its own (not the same objects as base's): it exports its own
    way, so it is a DLPack producer like any other, not one of the framework's arrays
    (read through its override, never handed over or returned as the framework's
    own)."""
    return tp is not base and any(
        getattr(tp, name, None) is not getattr(base, name, None)
        for name in ("__dlpack__", "__dlpack_device__")
    )


# --------------------------------------------------------------------------
# Layout helpers the frameworks share
# --------------------------------------------------------------------------


def is_compact(t: TensorInfo) -> bool:
    """Every element once, without gaps: some permutation of a C-contiguous layout."""
    dims = sorted(
        ((abs(s), n) for s, n in zip(t.strides, t.shape, strict=True) if n != 1), key=lambda d: d[0]
    )
    expected = 1
    for stride, n in dims:
        if stride != expected:
            return False
        expected *= n
    return all(s >= 0 for s, n in zip(t.strides, t.shape, strict=True) if n != 1)


def is_packed(t: Any) -> bool:
    """Bit-packed float6/float4 (a Tensor, or explain's metadata of a capsule)."""
    return bool(_core.is_packed(t)) if type(t) is Tensor else bool(t.packed)


def writable_view(t: Tensor) -> Tensor:
    """A writable-flagged view, for consumers whose arrays are immutable anyway
    (JAX, TensorFlow) or that copy (MLX) but only read legacy capsules."""
    return _core.set_readonly(t, False) if t.readonly else t


def folded(t: Tensor) -> Tensor:
    """t with its byte_offset folded into the data pointer (CPU memory)."""
    return _core.fold_offset(t)
