# SPDX-License-Identifier: Apache-2.0
from tensorbridge._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
