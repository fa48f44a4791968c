# SPDX-License-Identifier: Apache-2.0
"""The ``tensorbridge`` command line."""

from __future__ import annotations

import argparse
import sys


def _self_check() -> list[str]:
    """Exchange a small tensor with NumPy both ways and report what happened."""
    try:
        import numpy as np
    except ImportError:
        return ["numpy: not installed; self-check skipped"]
    import tensorbridge as tb

    lines = []
    a = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::-1]
    t = tb.from_dlpack(a)
    shared = t.data_ptr() == a.__array_interface__["data"][0]
    b = np.from_dlpack(t)
    b[0, 0] = -1.0
    write_through = bool(a[0, 0] == -1.0)
    lines.append(
        f"numpy -> tensorbridge -> numpy: {'zero-copy' if shared else 'COPIED'}, "
        f"write-through {'ok' if write_through else 'FAILED'}, "
        f"strides {t.strides} (negative stride kept)"
    )
    ok = shared and write_through and b.tolist() == a.tolist()
    lines.append(f"self-check: {'ok' if ok else 'FAILED'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    import tensorbridge as tb

    parser = argparse.ArgumentParser(
        prog="tensorbridge",
        description="Zero-copy tensor exchange over DLPack: show what interoperates here.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    args = parser.parse_args(argv)
    major, minor = tb.DLPACK_VERSION
    print(f"tensorbridge {tb.__version__} (DLPack {major}.{minor})")
    if args.version:
        return 0
    lines = _self_check()
    for line in lines:
        print(line)
    return 1 if any("FAILED" in line for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
