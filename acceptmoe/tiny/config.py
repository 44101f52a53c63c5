"""Settings of the tiny world (tasks, tokenizer, target model and its training, EAGLE-3 draft), loaded from
configs/tiny/world.yaml.

`load(path)` builds a frozen `TinyWorldConfig`; unknown or missing keys are errors naming the section and
the valid keys, and values are coerced to the declared types (YAML reads `3e-3` as a string).
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

from acceptmoe.errors import UserError
from acceptmoe.evals import generators as tasks
from acceptmoe.paths import REPO
from acceptmoe.yamlfile import read_mapping

DEFAULT_PATH = REPO / "configs" / "tiny" / "world.yaml"


class TinyConfigError(UserError, ValueError):
    """A tiny-world config that cannot be used; the message names the key and the fix."""


@dataclass(frozen=True)
class DataConfig:
    test_examples: int = 300
    tokenizer_examples: int = 3000


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int = 1024


@dataclass(frozen=True)
class TargetConfig:
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    num_experts: int = 128
    top_k: int = 8
    moe_intermediate_size: int = 32
    router_aux_loss_coef: float = 0.01
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    max_params: int = 8_000_000

    def __post_init__(self) -> None:
        if self.top_k * 8 > self.num_experts:
            raise TinyConfigError(f"target.top_k={self.top_k} exceeds num_experts/8={self.num_experts // 8}: "
                                  f"the tiny target mirrors Qwen3-MoE's sparse routing; lower top_k")
        if self.num_layers < 4:
            raise TinyConfigError(f"target.num_layers={self.num_layers}: the tiny target needs at least 4 layers")


@dataclass(frozen=True)
class MixtureConfig:
    """Examples of each family per round of the training stream (acceptmoe.evals.generators.mixed_stream)."""
    gsm: int = 3
    math: int = 3
    humaneval: int = 1
    mbpp: int = 1

    def __post_init__(self) -> None:
        try:
            tasks.check_weights(self.weights())
        except tasks.TaskError as err:
            raise TinyConfigError(f"train.mixture: {err}") from None

    def weights(self) -> dict[str, int]:
        return {"tiny-gsm": self.gsm, "tiny-math": self.math, "tiny-humaneval": self.humaneval,
                "tiny-mbpp": self.mbpp}


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 16
    lr: float = 3e-3
    min_lr_ratio: float = 0.05
    warmup_frac: float = 0.02
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    max_tokens: int = 8_000_000
    max_minutes: float = 50.0
    threads: int = 1
    log_every: int = 25
    mixture: MixtureConfig = field(default_factory=MixtureConfig)

    def __post_init__(self) -> None:
        if self.max_tokens <= 0 or self.max_minutes <= 0:
            raise TinyConfigError("train.max_tokens and train.max_minutes must be positive")
        if not 0 <= self.warmup_frac < 1:
            raise TinyConfigError(f"train.warmup_frac={self.warmup_frac} must lie in [0, 1)")


@dataclass(frozen=True)
class DraftConfig:
    """The EAGLE-3 draft head (one Llama decoder layer over fused target features) and its TTT training."""
    prompts_per_family: int = 600       # train prompts per family answered by the target (greedy)
    max_new_tokens: int = 128           # cap on each greedy completion
    gen_batch_size: int = 64
    intermediate_size: int = 512
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    ttt_steps: int = 5                  # training-time test unrolling depth (step 0 reads target features)
    step_decay: float = 0.8             # loss weight of unrolled step s is step_decay ** s
    batch_size: int = 32
    epochs: int = 6
    lr: float = 3e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 0.5
    max_minutes: float = 12.0           # guard on the training loop (data preparation excluded)
    threads: int = 1
    log_every: int = 25
    eval_prompts: int = 20              # test prompts per family for the accepted-length measurement
    lossless_prompts: int = 5           # of those, per family, also decoded with vanilla-ar and compared

    def __post_init__(self) -> None:
        if self.ttt_steps < 2:
            raise TinyConfigError(f"draft.ttt_steps={self.ttt_steps}: EAGLE-3 training needs at least 2 "
                                  f"unrolled steps")
        if self.num_heads % self.num_kv_heads:
            raise TinyConfigError(f"draft.num_heads={self.num_heads} is not a multiple of "
                                  f"draft.num_kv_heads={self.num_kv_heads}")
        if not 0 < self.step_decay <= 1:
            raise TinyConfigError(f"draft.step_decay={self.step_decay} must lie in (0, 1]")
        if self.lossless_prompts > self.eval_prompts:
            raise TinyConfigError("draft.lossless_prompts cannot exceed draft.eval_prompts")


@dataclass(frozen=True)
class TinyWorldConfig:
    seed: int = 0                       # the data: task examples, tokenizer corpus, batch and shuffle order
    weights_seed: int | None = None     # the weights: initialisation of target and draft (None: `seed`)
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    draft: DraftConfig = field(default_factory=DraftConfig)

    @property
    def init_seed(self) -> int:
        """The seed of the weights' initialisation (and of the training loops' torch generator)."""
        return self.seed if self.weights_seed is None else self.weights_seed


def _coerce(value, kind, where: str):
    if dataclasses.is_dataclass(kind):
        return build(kind, value, where)
    optional = [a for a in typing.get_args(kind) if a is not type(None)] if type(None) in typing.get_args(kind) else []
    if optional:                                                   # `X | None`
        return None if value is None else _coerce(value, optional[0], where)
    try:
        if kind is bool:
            if not isinstance(value, bool):
                raise TypeError
            return value
        if kind is int:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise TypeError
            return int(float(value))
        return kind(value)
    except (TypeError, ValueError):
        raise TinyConfigError(f"{where}: expected {kind.__name__}, got {value!r}") from None


def build(cls, mapping, where: str = "config"):
    """An instance of dataclass `cls` from a mapping; unknown keys are errors (nested sections too)."""
    if not isinstance(mapping, dict):
        raise TinyConfigError(f"{where}: expected a mapping of keys, got {type(mapping).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise TinyConfigError(f"{where}: unknown key(s) {unknown}; valid keys: {names}")
    return cls(**{k: _coerce(v, hints[k], f"{where}.{k}") for k, v in mapping.items()})


def load(path: str | Path = DEFAULT_PATH) -> TinyWorldConfig:
    """The frozen config from a YAML file (missing keys keep their defaults)."""
    path = Path(path)
    if not path.is_file():
        raise TinyConfigError(f"tiny-world config {path} does not exist; the default is {DEFAULT_PATH}")
    return build(TinyWorldConfig, read_mapping(path, TinyConfigError), where=path.name)


def as_dict(cfg: TinyWorldConfig) -> dict:
    return dataclasses.asdict(cfg)
