"""Routing traces of speculative generations: what each verification block selected, routed and accepted.

Per verification block: the tree's parent list (depths follow from it), the accepted path (node indices,
root first), the accept length (tokens the step committed: accepted draft nodes plus the bonus token, before
any truncation at EOS or max_new_tokens) and, per MoE layer:

| field            | meaning                                                                  |
|------------------|--------------------------------------------------------------------------|
| `layer`          | the model's layer index                                                  |
| `set_size`       | abs(S), the final eligible set (after residency pruning where it ran)    |
| `anchor_size`    | abs(A), the root anchor (0 for methods without one)                      |
| `natural_union`  | experts in the union of the natural top-k sets of the block's tokens     |
| `routed_union`   | experts in the union of the constrained (actually used) top-k sets       |
| `utility_kept`   | sum of the method's score over S / its sum over all experts (1 if zero)  |

Stored as JSONL: a `meta` line starts each trace (method, tree shape, config, ...), then one `block` line per
verification block with the layer fields as columns (lists over layers). Only ints, floats and strings.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from acceptmoe.methods import METHODS, BlockInfo, CommitmentTable, Plan

LAYER_FIELDS = ("layer", "set_size", "anchor_size", "natural_union", "routed_union", "utility_kept")
FORMAT_VERSION = 1


@dataclass
class BlockRecord:
    step: int                        # index of the target step within the generation
    parents: list[int]               # [T], parents[0] == -1
    path: list[int]                  # accepted node indices, root (0) first
    accept_length: int               # len(path): accepted draft nodes + the bonus token
    layers: dict[str, list] | None = None   # LAYER_FIELDS -> one value per MoE layer (None: not recorded)

    @property
    def depths(self) -> list[int]:
        return BlockInfo.from_parents(self.parents).depth.tolist()

    def to_json(self) -> dict:
        return {"kind": "block", "step": self.step, "parents": self.parents, "path": self.path,
                "accept_length": self.accept_length, "layers": self.layers}

    @classmethod
    def from_json(cls, d: dict) -> BlockRecord:
        return cls(step=d["step"], parents=d["parents"], path=d["path"], accept_length=d["accept_length"],
                   layers=d.get("layers"))


@dataclass
class Trace:
    meta: dict = field(default_factory=dict)          # method, tree shape, selector config, prompt, ...
    blocks: list[BlockRecord] = field(default_factory=list)

    def add_block(self, step: int, parents: Sequence[int], path: Sequence[int],
                  layer_rows: Sequence[Sequence[float]] | None) -> BlockRecord:
        """layer_rows: one row per MoE layer, values in LAYER_FIELDS order."""
        layers = None if layer_rows is None else layer_columns(layer_rows)
        rec = BlockRecord(step, [int(p) for p in parents], [int(n) for n in path], len(path), layers)
        self.blocks.append(rec)
        return rec

    def lines(self) -> list[str]:
        head = {"kind": "meta", "format_version": FORMAT_VERSION, **self.meta}
        return [json.dumps(head)] + [json.dumps(b.to_json()) for b in self.blocks]

    def save(self, path: str | Path) -> None:
        """Write this trace alone to `path` (overwrites)."""
        save_traces(path, [self])

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        traces = load_traces(path)
        if len(traces) != 1:
            raise ValueError(f"{path} holds {len(traces)} traces; use load_traces() to read them all")
        return traces[0]

    @property
    def mean_accept_length(self) -> float:
        return sum(b.accept_length for b in self.blocks) / len(self.blocks) if self.blocks else 0.0


def layer_stats(layer: int, natural_ids: Tensor, routed_ids: Tensor, out, valid: Tensor | None = None) -> Tensor:
    """fp64 [B, len(LAYER_FIELDS)]: one MoE layer's trace fields for B blocks, on the device (no host sync),
    from the natural and the routed ids [B, T, k], the verifier's output (`VerifierOutput`: eligible,
    utility, anchor [B, E]) and the blocks' valid tokens bool [B, T] (None: every token). Both engines (the
    native one, the SGLang plugin) record through this function."""
    B, E, dev = out.eligible.shape[0], out.eligible.shape[-1], out.eligible.device

    def union(ids: Tensor) -> Tensor:                              # [B]: experts routed to by a valid token
        ids = ids.reshape(B, -1) if valid is None else torch.where(valid[..., None], ids, E).reshape(B, -1)
        return torch.zeros(B, E + 1, dtype=torch.bool, device=dev).scatter_(1, ids, True)[:, :E].sum(-1)

    u = out.utility.double()                                       # [B, E]
    total = u.sum(-1)
    kept = torch.where(total > 0, (u * out.eligible).sum(-1) / total.clamp_min(1e-300), 1.0)
    return torch.stack([torch.full((B,), float(layer), dtype=torch.float64, device=dev),
                        out.eligible.sum(-1).double(), out.anchor.sum(-1).double(), union(natural_ids).double(),
                        union(routed_ids).double(), kept], -1)


def trace_meta(engine: str, plan: Plan, tree, store: str, prompt_len: int, max_new_tokens: int,
               ignore_eos: bool, sampling: dict | None = None) -> dict:
    """The `meta` line of a generation's trace, the same fields and types whichever engine wrote it; `sampling`
    (`GenerationOptions.sampling()`: temperature, top_k, top_p, the request's seed) only when it sampled, so
    a greedy trace is what it was before sampling existed."""
    meta = {"engine": engine, **plan.describe(), "tree": dataclasses.asdict(tree) if plan.spec.speculates else None,
            "store": store, "prompt_len": int(prompt_len), "max_new_tokens": int(max_new_tokens),
            "ignore_eos": bool(ignore_eos)}
    if sampling is not None:
        meta["sampling"] = dict(sampling)
    return meta


def layer_columns(layer_rows: Sequence[Sequence[float]]) -> dict[str, list]:
    """Rows per MoE layer (LAYER_FIELDS order, e.g. `layer_stats` read back) -> the trace's columns: counts
    as ints, utility_kept rounded to 6 decimals."""
    cols = list(zip(*layer_rows, strict=False)) if layer_rows else [() for _ in LAYER_FIELDS]
    return {name: [_compact(name, v) for v in col] for name, col in zip(LAYER_FIELDS, cols, strict=False)}


def _compact(name: str, v: float) -> int | float:
    return round(float(v), 6) if name == "utility_kept" else int(round(float(v)))


def save_traces(path: str | Path, traces: Iterable[Trace]) -> None:
    """Write several traces to one JSONL file (overwrites; write to a fresh file per run)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with tmp.open("w") as f:
        for t in traces:
            f.write("\n".join(t.lines()) + "\n")
    tmp.replace(p)


def load_traces(path: str | Path) -> list[Trace]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"trace file {p} not found")
    traces: list[Trace] = []
    for n, line in enumerate(p.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        d = json.loads(line)
        if d.get("kind") == "meta":
            if d.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"{p}:{n}: trace format {d.get('format_version')} is not {FORMAT_VERSION}")
            meta = {k: v for k, v in d.items() if k not in ("kind", "format_version")}
            traces.append(Trace(meta=meta))
        elif d.get("kind") == "block":
            if not traces:
                raise ValueError(f"{p}:{n}: a block line before any meta line")
            traces[-1].blocks.append(BlockRecord.from_json(d))
        else:
            raise ValueError(f"{p}:{n}: unknown record kind {d.get('kind')!r} (expected meta or block)")
    return traces


def commitment_records(traces: Iterable[Trace]) -> list[tuple[list[int], list[int]]]:
    """(parents, accepted path) per verification block, the input of CommitmentTable.from_records."""
    return [(b.parents, b.path) for t in traces for b in t.blocks]


def commitment_table(traces: Sequence[Trace], max_depth: int | None = None,
                     provenance: dict | None = None) -> CommitmentTable:
    """Count m_d and c_d over the traces' blocks. max_depth defaults to the tree shape's num_steps.

    The provenance records the traces' methods, their routing policy (natural when every one routes
    naturally, `MethodSpec.routes_naturally`; else masked) and tree shape unless given."""
    traces = list(traces)
    shapes = {json.dumps(t.meta.get("tree")) for t in traces}
    if len(shapes) > 1:
        raise ValueError(f"traces come from different tree shapes {sorted(shapes)}: calibrate per shape")
    if max_depth is None:
        tree = traces[0].meta.get("tree") if traces else None
        if not tree:
            raise ValueError("max_depth not given and the traces record no tree shape")
        max_depth = tree["num_steps"]
    methods: list[str] = sorted({t.meta.get("method") for t in traces})  # type: ignore[misc]  # trace_meta names it
    natural = bool(methods) and all(m in METHODS and METHODS[m].routes_naturally for m in methods)
    prov = {"methods": methods, "policy": "natural" if natural else "masked",
            "tree": traces[0].meta.get("tree") if traces else None, **(provenance or {})}
    return CommitmentTable.from_records(commitment_records(traces), max_depth=max_depth, provenance=prov)
