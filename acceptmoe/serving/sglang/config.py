"""The SGLang plugin's settings: read from the environment (and one JSON/YAML file), validated once at load.

SGLang starts its scheduler in a spawned process, so the plugin cannot be configured by a Python call in the
launching process: every process reads the same environment.

| variable                  | meaning                                                               | default |
|---------------------------|-----------------------------------------------------------------------|---------|
| `ACCEPTMOE_SGLANG_CONFIG` | a JSON or YAML file holding any of the keys below (lower case)        | none    |
| `ACCEPTMOE_METHOD`        | method name (`acceptmoe`, `acceptmoe-b`, `count-b`, `moe-spec`, `standard-sd`); unset: routing untouched | none |
| `ACCEPTMOE_BUDGET`        | B for the fixed-budget methods                                        | none    |
| `ACCEPTMOE_COMMITMENT`    | commitment table (`CommitmentTable.save` JSON) for the AcceptMoE methods | none |
| `ACCEPTMOE_P_HAT`         | the commitment probabilities themselves, comma-separated (instead of a table) | none |
| `ACCEPTMOE_BETA`          | commitment sharpness beta                                             | 0.5     |
| `ACCEPTMOE_PRUNE`         | residency pruning; only `off` (SGLang keeps every expert resident)    | off     |
| `ACCEPTMOE_TRACE`         | JSONL file the routing trace is appended to (the native trace format) | none    |
| `ACCEPTMOE_MAX_RECORDS`   | verify steps kept in memory before the oldest are dropped             | 4096    |
| `ACCEPTMOE_FORCE_DECODE`  | test switch: also restrict plain decode passes, all of a pass's tokens taken as one star-shaped block (root = the first request's token) | 0 |
| `ACCEPTMOE_DUMP`          | test switch: a directory where each restricted MoE call's logits, set and routing are saved (bounded) | none |

Environment variables override the file. Errors are `PluginConfigError` (a `UserError`): one line naming the
key and the fix.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from acceptmoe.errors import UserError
from acceptmoe.methods import METHODS, CommitmentTable, ConfigError, SelectorConfig, get_method

ENV_FILE = "ACCEPTMOE_SGLANG_CONFIG"
PREFIX = "ACCEPTMOE_"
KEYS = ("method", "budget", "commitment", "p_hat", "beta", "prune", "trace", "max_records", "force_decode", "dump")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


class PluginConfigError(UserError, ValueError):
    """A plugin setting that cannot be used; the message names the setting and the fix."""


@dataclass(frozen=True)
class PluginConfig:
    method: str | None = None             # None: the plugin leaves routing untouched (records only)
    budget: int | None = None
    commitment: str | None = None         # path of a CommitmentTable JSON
    beta: float = 0.5
    prune: bool = False
    trace: str | None = None
    max_records: int = 4096
    force_decode: bool = False
    dump: str | None = None
    p_hat: tuple[float, ...] | None = None   # loaded from `commitment`

    @property
    def restricts(self) -> bool:
        return self.method is not None and get_method(self.method).restricts

    def selector_config(self) -> SelectorConfig:
        spec = get_method(self.method)
        return SelectorConfig(budget=self.budget if spec.needs_budget else None, beta=self.beta,
                              p_hat=self.p_hat if spec.needs_commitment else None)

    def describe(self) -> dict:
        return {k: getattr(self, k) for k in ("method", "budget", "commitment", "beta", "prune")}


def load_config(env: Mapping[str, str] | None = None) -> PluginConfig:
    """The plugin's settings from `env` (default os.environ), validated."""
    env = os.environ if env is None else env
    raw: dict = {}
    if env.get(ENV_FILE):
        raw.update(_read_file(Path(env[ENV_FILE])))
    for key in KEYS:
        if (PREFIX + key.upper()) in env:
            raw[key] = env[PREFIX + key.upper()]
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise PluginConfigError(f"{env.get(ENV_FILE)}: unknown plugin setting(s) {unknown}; valid: {', '.join(KEYS)}")
    return validate(raw)


def validate(raw: Mapping) -> PluginConfig:
    """Typed, checked settings from a dict of raw values (strings from the environment, or file values)."""
    vals = dict(raw)
    method = vals.get("method") or None
    if method is not None:
        if method not in METHODS or not METHODS[method].speculates:
            valid = ", ".join(n for n, s in METHODS.items() if s.speculates)
            raise PluginConfigError(f"ACCEPTMOE_METHOD={method!r} is not a verifier method; valid: {valid}")
    spec = get_method(method) if method else None
    budget = _int("budget", vals.get("budget"))
    if spec is not None and spec.needs_budget and budget is None:
        raise PluginConfigError(f"method {method} needs a budget: set ACCEPTMOE_BUDGET=B (top_k <= B <= E)")
    if budget is not None and (spec is None or not spec.needs_budget):
        raise PluginConfigError(f"ACCEPTMOE_BUDGET applies to the fixed-budget methods only "
                                f"({', '.join(n for n, s in METHODS.items() if s.needs_budget)}); unset it")
    p_hat, commitment = _floats("p_hat", vals.get("p_hat")), vals.get("commitment") or None
    if spec is not None and spec.needs_commitment and p_hat is None:
        if commitment is None:
            raise PluginConfigError(f"method {method} needs commitment probabilities: set ACCEPTMOE_COMMITMENT to a "
                                    f"commitment table calibrated on Standard SD traces (acceptmoe calibrate)")
        try:
            p_hat = CommitmentTable.load(commitment).p_hat
        except (OSError, ValueError, KeyError) as exc:
            raise PluginConfigError(f"ACCEPTMOE_COMMITMENT={commitment}: cannot read the commitment table ({exc})") from None
    prune = _bool("prune", vals.get("prune", False))
    if prune:
        raise PluginConfigError("ACCEPTMOE_PRUNE: residency pruning needs an offloaded expert store, which SGLang "
                                "does not have; set it off (offloaded runs use the native engine)")
    beta = _float("beta", vals.get("beta", 0.5))
    max_records = _int("max_records", vals.get("max_records", 4096))
    if max_records < 1:
        raise PluginConfigError(f"ACCEPTMOE_MAX_RECORDS must be >= 1, got {max_records}")
    cfg = PluginConfig(method=method, budget=budget, commitment=commitment, beta=beta, prune=False,
                       trace=vals.get("trace") or None, max_records=max_records,
                       force_decode=_bool("force_decode", vals.get("force_decode", False)),
                       dump=vals.get("dump") or None, p_hat=p_hat)
    if method is not None:
        try:
            cfg.selector_config()
        except ConfigError as exc:
            raise PluginConfigError(f"plugin settings: {exc}") from None
    return cfg


def to_env(cfg: PluginConfig) -> dict[str, str]:
    """Environment variables that reproduce `cfg` in another process (unset keys are empty strings)."""
    out = {}
    for f in dataclasses.fields(cfg):
        if f.name in KEYS:
            v = getattr(cfg, f.name)
            if isinstance(v, tuple):
                v = ",".join(repr(x) for x in v)
            out[PREFIX + f.name.upper()] = "" if v is None else ("1" if v is True else "0" if v is False else str(v))
    return out


def _read_file(path: Path) -> dict:
    if not path.is_file():
        raise PluginConfigError(f"{ENV_FILE}={path}: no such file; point it at a JSON or YAML settings file")
    text = path.read_text()
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is the user's file
        raise PluginConfigError(f"{path}: cannot parse the plugin settings ({exc})") from None
    if not isinstance(data, dict):
        raise PluginConfigError(f"{path}: the plugin settings must be a mapping of {', '.join(KEYS)}")
    return {str(k).lower(): v for k, v in data.items()}


def _int(name: str, v) -> int | None:
    if v is None or v == "":
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        raise PluginConfigError(f"ACCEPTMOE_{name.upper()} must be an integer, got {v!r}") from None


def _float(name: str, v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise PluginConfigError(f"ACCEPTMOE_{name.upper()} must be a number, got {v!r}") from None


def _floats(name: str, v) -> tuple[float, ...] | None:
    if v is None or v == "":
        return None
    items = v.split(",") if isinstance(v, str) else list(v)
    return tuple(_float(name, x) for x in items)


def _bool(name: str, v) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in _TRUE or s in _FALSE:
        return s in _TRUE
    raise PluginConfigError(f"ACCEPTMOE_{name.upper()} must be on/off (1/0), got {v!r}")
