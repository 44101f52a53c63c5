"""The package's one cache folder, `cache_root()`: $ACCEPTMOE_CACHE, else ~/.cache/acceptmoe. What lives there
(the compiled cpu verifier library, graded code's expected outputs) is each user's own subfolder or file.
This module imports nothing from the package, so every room reads the same folder."""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "ACCEPTMOE_CACHE"


def cache_root() -> Path:
    """$ACCEPTMOE_CACHE, else ~/.cache/acceptmoe (not created here)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / __name__.partition(".")[0])
