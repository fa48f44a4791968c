# SPDX-License-Identifier: Apache-2.0
from tensorbridge._cli import main

raise SystemExit(main())
