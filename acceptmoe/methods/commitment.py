"""Commitment probabilities p_hat[d] = c_d / m_d from Standard SD verification traces.

m_d counts draft nodes proposed at depth d, c_d those on the accepted path (a marginal commitment
probability, not the conditional acceptance rate). Counts are stored, not only ratios, together with the
provenance of the traces: target, draft, task and split, tree shape and the routing policy that produced
them (`natural` for Standard SD traces, `masked` for on-policy recalibration under a selector).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .tree import BlockInfo

FORMAT_VERSION = 1


@dataclass
class CommitmentTable:
    max_depth: int
    proposed: list[int] = field(default_factory=list)    # m_d, d = 0..max_depth
    committed: list[int] = field(default_factory=list)   # c_d
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.max_depth + 1
        self.proposed = list(self.proposed) or [0] * n
        self.committed = list(self.committed) or [0] * n
        if len(self.proposed) != n or len(self.committed) != n:
            raise ValueError(f"counts must have max_depth + 1 = {n} entries, got "
                             f"{len(self.proposed)} proposed and {len(self.committed)} committed")
        if (any(c > m for c, m in zip(self.committed, self.proposed, strict=True))
                or min(self.committed + self.proposed) < 0):
            raise ValueError("committed counts must satisfy 0 <= c_d <= m_d")

    def add_block(self, block: BlockInfo, accepted: Sequence[int]) -> None:
        """Count one verification block; `accepted`: node indices on the accepted path, root (0) first."""
        if not accepted or accepted[0] != 0:
            raise ValueError("an accepted path starts at the root (index 0)")
        if block.max_depth > self.max_depth:
            raise ValueError(f"block reaches depth {block.max_depth} but the table has max_depth "
                             f"{self.max_depth}: build the table for the tree shape that produced the traces")
        for prev, node in zip(accepted, accepted[1:], strict=False):
            if not 0 < node < block.num_tokens or int(block.parents[node]) != prev:
                raise ValueError(f"accepted path {list(accepted)} is not a root-to-node path of the tree")
        for d, n in enumerate(block.level_sizes.tolist()):
            self.proposed[d] += n
        for node in accepted:
            self.committed[int(block.depth[node])] += 1

    @classmethod
    def from_records(cls, records: Iterable[tuple[Sequence[int], Sequence[int]]], max_depth: int,
                     provenance: dict | None = None) -> CommitmentTable:
        """records: (parents, accepted path) per verification block."""
        table = cls(max_depth=max_depth, provenance=dict(provenance or {}))
        for parents, accepted in records:
            table.add_block(BlockInfo.from_parents(parents), accepted)
        return table

    @property
    def p_hat(self) -> tuple[float, ...]:
        """c_d / m_d; p_hat[0] = 1; a depth never proposed in the traces gets 0 (no evidence of commitment)."""
        if self.proposed[0] == 0:
            raise ValueError("the commitment table holds no blocks: calibrate on Standard SD traces first")
        return tuple(1.0 if d == 0 else (c / m if m else 0.0)
                     for d, (c, m) in enumerate(zip(self.committed, self.proposed, strict=True)))

    def to_dict(self) -> dict:
        return {"format_version": FORMAT_VERSION, "max_depth": self.max_depth, "proposed": self.proposed,
                "committed": self.committed, "p_hat": list(self.p_hat) if self.proposed[0] else None,
                "provenance": self.provenance}

    def save(self, path: str | Path) -> None:
        """Atomic: written to a temporary file, fsynced, then renamed over `path` (a resume reads it)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(self.to_dict(), indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> CommitmentTable:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"commitment table {p} not found: run the calibrate step first")
        d = json.loads(p.read_text())
        if d.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{p}: commitment table format {d.get('format_version')} is not {FORMAT_VERSION}")
        return cls(max_depth=d["max_depth"], proposed=d["proposed"], committed=d["committed"],
                   provenance=d.get("provenance", {}))
