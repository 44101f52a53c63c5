"""Regenerate the tiny world from seeds: data -> tokenizer -> target -> draft (`./reproduce.sh train-tiny`).

Writes into one output folder (default models/tiny/):
  data/<family>-test.jsonl   the test splits (and data/manifest.json with their sha256)
  tokenizer/                 the byte-level BPE (Hugging Face format)
  target/                    the Qwen3-MoE target (safetensors, config, tokenizer, train_summary.json)
  draft/                     the EAGLE-3 draft
  README.md, card.json       the model card: measured accuracy, router health, routed unions, tau
  train_tiny.log             the log of every stage
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path

from acceptmoe.commands import command, parser
from acceptmoe.evals import generators as tasks

from . import card, tokenizer, train_draft, train_target
from . import config as tiny_config

log = logging.getLogger("acceptmoe.tiny")
STAGES = ("data", "tokenizer", "target", "draft", "card")


def split_text(rows: list[dict]) -> str:
    """The JSONL text of a test split as written to data/<family>-test.jsonl (one sorted-key object a line)."""
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def stage_data(cfg: tiny_config.TinyWorldConfig, out: Path) -> None:
    """Write each family's test split as JSONL plus a manifest of sha256 sums."""
    folder = out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"tasks_version": tasks.TASKS_VERSION, "files": {}}
    for family in tasks.FAMILIES:
        rows = tasks.generate(family, "test", cfg.data.test_examples, seed=cfg.seed)
        text = split_text(rows)
        path = folder / f"{family}-test.jsonl"
        path.write_text(text)
        manifest["files"][path.name] = {"rows": len(rows), "sha256": hashlib.sha256(text.encode()).hexdigest()}
        log.info("data: %s (%d rows)", path, len(rows))
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def stage_tokenizer(cfg: tiny_config.TinyWorldConfig, out: Path) -> None:
    examples = [e for f in tasks.FAMILIES
                for e in tasks.generate(f, "train", cfg.data.tokenizer_examples, seed=cfg.seed)]
    tok = tokenizer.build(tokenizer.corpus(examples), cfg.tokenizer.vocab_size, out / "tokenizer")
    log.info("tokenizer: %d tokens, fitted on %d train examples -> %s", len(tok), len(examples), out / "tokenizer")


def stage_target(cfg: tiny_config.TinyWorldConfig, out: Path) -> None:
    train_target.run(cfg, out / "tokenizer", out / "target")


def stage_draft(cfg: tiny_config.TinyWorldConfig, out: Path) -> None:
    (out / "draft").mkdir(parents=True, exist_ok=True)
    train_draft.run(cfg, out / "target", out / "draft")


@command("train-tiny", "regenerate models/tiny from seeds: data, tokenizer, target, EAGLE-3 draft, model card")
def main(argv: list[str] | None = None) -> int:
    p = parser("train-tiny")
    p.add_argument("--config", default=str(tiny_config.DEFAULT_PATH), help="tiny-world YAML")
    p.add_argument("--out", default="models/tiny", help="output folder")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="another world: weights initialised from seed S, data and tokenizer unchanged (sets "
                        "the config's weights_seed; give another --out)")
    p.add_argument("--stages", default=",".join(STAGES),
                   help=f"comma-separated subset of {','.join(STAGES)} (later stages read earlier outputs)")
    args = p.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        p.error(f"unknown stage(s) {bad}; valid stages: {', '.join(STAGES)}")
    cfg, out = tiny_config.load(args.config), Path(args.out)
    if args.seed is not None:
        cfg = dataclasses.replace(cfg, weights_seed=args.seed)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    handler = logging.FileHandler(out / "train_tiny.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger().addHandler(handler)
    log.info("train-tiny: stages %s, config %s, out %s", stages, args.config, out)
    runners = {"data": lambda: stage_data(cfg, out), "tokenizer": lambda: stage_tokenizer(cfg, out),
               "target": lambda: stage_target(cfg, out), "draft": lambda: stage_draft(cfg, out),
               "card": lambda: card.main(["--model", str(out)])}
    for stage in stages:
        start = time.perf_counter()
        runners[stage]()
        log.info("stage %s done in %.1f s", stage, time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
