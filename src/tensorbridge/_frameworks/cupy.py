# SPDX-License-Identifier: Apache-2.0
"""CuPy as a bridge target: GPU memory only, so CPU data is copied to the GPU."""

from __future__ import annotations

from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._devices import Device
from tensorbridge._frameworks.base import STANDARD, Framework, TensorInfo

__all__ = ["CupyFramework"]

#: Device types whose memory cupy.from_dlpack takes as it is.
_GPU_DEVICES = ("cuda", "cuda_managed", "rocm")


class CupyFramework(Framework):
    name = "cupy"
    modules = ("cupy",)
    import_names = (("cupy", "cupy"),)
    distribution = "cupy"
    label = "cupy"
    needs_gpu = True
    dtypes = STANDARD
    own_types = ("cupy.ndarray",)
    path = "cupy.from_dlpack (CUDA memory); cupy.asarray copies CPU memory to the GPU"
    quirks = (
        (
            "cupy.from_dlpack refuses CPU producers with TypeError",
            "CPU data is copied to the GPU with cupy.asarray when copy= allows it",
        ),
    )

    @classmethod
    def own_copy_reasons(cls, t: TensorInfo) -> list[str]:
        if t.device.type in ("cuda", "cuda_managed"):
            return []
        return [f"cupy holds GPU memory: the {t.device} data is copied to the GPU"]

    @classmethod
    def importer(cls) -> Any:
        return cls.module().from_dlpack

    @classmethod
    def current_stream(cls, device: Device) -> int | None:
        cupy = cls.module()
        with cupy.cuda.Device(device.index):
            handle = int(cupy.cuda.get_current_stream().ptr)
        # The null stream's handle is 0: DLPack's 1 on CUDA (legacy default), 0 on ROCm.
        return 1 if handle == 0 and device.type != "rocm" else handle

    @classmethod
    def make(cls, t: Tensor) -> Any:
        cupy = cls.module()
        if t.device.type in _GPU_DEVICES:
            return cupy.from_dlpack(t)
        return cupy.asarray(t.numpy())
