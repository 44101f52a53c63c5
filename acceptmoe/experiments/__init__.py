"""Experiments: what to run on which models, where results go, and the tables and figures built from them.

One package per experiment over a shared spine, each found by the record its `__init__.py` declares
(`spine.catalog`: the folder is walked, nothing lists the experiments); imports run spine <- experiment, never
from one experiment into another but for a reader's record modules (a test holds it), and `tables` rebuilds
every experiment's outputs through the records. Tools and integrations stand above this package.

The packages and what each may import: docs/architecture.md, "Rooms and the one-way rule" and "Experiments are
found".
"""
