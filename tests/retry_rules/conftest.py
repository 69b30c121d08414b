"""tests/retry_rules: end-to-end tests of retry rules on failure causes, infra-retry backoff and the storm guard."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent, HERE.parent / "aip97_core"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
