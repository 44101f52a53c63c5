"""Where the package's files are: the repository (`REPO`), the embedded tiny world (`TINY`: its target/ and
draft/), and the one cache folder, `cache_root()`: $ACCEPTMOE_CACHE, else ~/.cache/acceptmoe. What lives
there (the compiled cpu verifier library, graded code's expected outputs) is each user's own subfolder or
file. This module imports nothing from the package, so every room reads the same places."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]     # acceptmoe/paths.py -> the repository
TINY = REPO / "models" / "tiny"                # the embedded tiny world: target/ and draft/
CACHE_ENV = "ACCEPTMOE_CACHE"


def cache_root() -> Path:
    """$ACCEPTMOE_CACHE, else ~/.cache/acceptmoe (not created here)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / __name__.partition(".")[0])
