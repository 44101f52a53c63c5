"""The SGLang plugin's settings: read from the environment (and one JSON/YAML file), validated when read.

SGLang starts its scheduler in a spawned process, so the plugin cannot be configured by a Python call in the
launching process: every process reads the same environment. A server whose settings file is replaced between
generations reads it again before its next target pass (`Watched`), so one server serves consecutive plans;
`restart_reason` says which changes a running server cannot take (what a captured CUDA graph holds).

| variable                  | meaning                                                               | default |
|---------------------------|-----------------------------------------------------------------------|---------|
| `ACCEPTMOE_SGLANG_CONFIG` | a JSON or YAML file holding any of the keys below (lower case)        | none    |
| `ACCEPTMOE_METHOD`        | any speculating method (`acceptmoe`, `standard-sd`, the admitting ones, ...); unset: routing untouched | none |
| `ACCEPTMOE_BUDGET`        | B for the fixed-budget methods                                        | none    |
| `ACCEPTMOE_COMMITMENT`    | commitment table (`CommitmentTable.save` JSON) for the AcceptMoE methods | none |
| `ACCEPTMOE_P_HAT`         | the commitment probabilities themselves, comma-separated (instead of a table) | none |
| `ACCEPTMOE_BETA`          | commitment sharpness beta                                             | 0.5     |
| `ACCEPTMOE_B0`            | the pair's matched budget, for a fixed-budget method without ACCEPTMOE_BUDGET | none |
| `ACCEPTMOE_SELECTOR`      | the base selector (`SelectorConfig` fields but budget and p_hat) as a JSON mapping | defaults |
| `ACCEPTMOE_COST`          | the verify-cost profile of a method that admits draft nodes: a profile file (`profile-verify`'s JSON) or its `cost` mapping as JSON | none |
| `ACCEPTMOE_PRUNE`         | residency pruning; only `off` (SGLang keeps every expert resident)    | off     |
| `ACCEPTMOE_TRACE`         | JSONL file the routing trace is appended to (the native trace format) | none    |
| `ACCEPTMOE_MAX_RECORDS`   | verify steps kept in memory before the oldest are dropped             | 4096    |
| `ACCEPTMOE_VERIFIER`      | the verifier backend inside the forward: `auto` (the fused Triton kernel on CUDA, torch elsewhere), `torch`, or `triton` (off CUDA only under TRITON_INTERPRET=1) | auto |
| `ACCEPTMOE_FORCE_DECODE`  | test switch: also restrict plain decode passes, all of a pass's tokens taken as one star-shaped block (root = the first request's token); eager passes only | 0 |
| `ACCEPTMOE_DUMP`          | test switch: a directory for one file per verify pass (SGLang's tree mask and links, the recovered trees, per MoE layer the logits, sets and routing; bounded); eager passes only | none |

Environment variables override the file. The method's settings (method, budget, beta) are parsed into a
`Variant` and nothing else (`Variant.from_mapping`, the parser configs and the lm-eval backend share); the
plugin binds it to the router, experts and tree depth SGLang serves (`PluginConfig.bind`), which checks the
rest. Errors are `PluginConfigError` (a `UserError`): one line naming the key and the fix. `for_plan` and
`settings` are the other direction: a `Plan` as the settings that run it, as file or environment values.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from acceptmoe.errors import UserError
from acceptmoe.kernels.verifier import same_calls
from acceptmoe.methods import (
    METHODS,
    CommitmentTable,
    ConfigError,
    Fit,
    Plan,
    SelectorConfig,
    Variant,
    VerifyCost,
)
from acceptmoe.yamlfile import read_mapping

ENV_FILE = "ACCEPTMOE_SGLANG_CONFIG"
PREFIX = "ACCEPTMOE_"
KEYS = ("method", "budget", "b0", "commitment", "p_hat", "beta", "selector", "cost", "prune", "trace",
        "max_records", "verifier", "force_decode", "dump")
GRAPH_VERIFIERS = ("auto", "torch", "triton")   # the kernels.VERIFIERS a graph can hold (not the cpu library)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


class PluginConfigError(UserError, ValueError):
    """A plugin setting that cannot be used; the message names the setting and the fix."""


@dataclass(frozen=True)
class PluginConfig:
    variant: Variant | None = None        # None: the plugin leaves routing untouched (records only)
    b0: int | None = None                 # the budget of a fixed-budget variant that pins none
    selector: SelectorConfig = SelectorConfig()   # the base selector the variant's overrides apply to
    commitment: str | None = None         # path of a CommitmentTable JSON
    p_hat: tuple[float, ...] | None = None   # the commitment probabilities (from `commitment`, or given)
    cost: VerifyCost | None = None        # the verify-cost profile an admitting method weighs its trees with
    trace: str | None = None
    max_records: int = 4096
    verifier: str = "auto"                # the verifier backend inside the forward (GRAPH_VERIFIERS)
    force_decode: bool = False
    dump: str | None = None

    @property
    def method(self) -> str | None:
        return self.variant.method if self.variant is not None else None

    @property
    def restricts(self) -> bool:
        return self.variant is not None and self.variant.spec.restricts

    @property
    def admits(self) -> bool:
        """Token-side admission: the method may leave drafted nodes out of a pass (`serving.sglang.admission`)."""
        return self.variant is not None and self.variant.spec.admits

    @property
    def measures(self) -> bool:
        """Its admission rule counts experts, so every verify pass computes its per-layer unions."""
        return self.admits and self.variant.spec.admission.models_experts

    @property
    def recording(self) -> bool:
        return self.trace is not None or self.dump is not None

    def bind(self, fit: Fit) -> Plan:
        """The plan the plugin's verifier runs, for the router, experts and tree depth SGLang serves."""
        return self.variant.bind(fit, commitment=self.p_hat, b0=self.b0, selector=self.selector, cost=self.cost)

    def describe(self) -> dict:
        return {"variant": None if self.variant is None else self.variant.describe(), "commitment": self.commitment}


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
    """Typed, checked settings from a dict of raw values (strings from the environment, or file values): the
    method's settings become a `Variant` (its own checks), p_hat is read once; the rest are switches."""
    vals = dict(raw)
    method = vals.get("method") or None
    if method is not None and (method not in METHODS or not METHODS[method].speculates):
        valid = ", ".join(n for n, s in METHODS.items() if s.speculates)
        raise PluginConfigError(f"ACCEPTMOE_METHOD={method!r} is not a verifier method; valid: {valid}")
    cost = _cost(vals.get("cost"))
    if method is not None and METHODS[method].admits and cost is None:
        raise PluginConfigError(f"ACCEPTMOE_METHOD={method} admits draft nodes under a verify-cost model: set "
                                f"ACCEPTMOE_COST to a profile (./reproduce.sh profile-verify writes one)")
    prune = _bool("prune", vals.get("prune", False))
    if prune:
        raise PluginConfigError("ACCEPTMOE_PRUNE: residency pruning needs an offloaded expert store, which SGLang "
                                "does not have; set it off (offloaded runs use the native engine)")
    budget, b0, beta = _int("budget", vals.get("budget")), _int("b0", vals.get("b0")), vals.get("beta")
    if method is None and (budget is not None or b0 is not None or beta not in (None, "")):
        raise PluginConfigError("ACCEPTMOE_BUDGET, ACCEPTMOE_B0 and ACCEPTMOE_BETA need ACCEPTMOE_METHOD: set it too")
    selector = _selector(vals.get("selector"))
    variant = None
    if method is not None:
        overrides = {} if beta in (None, "") else {"beta": _float("beta", beta)}
        try:
            variant = Variant.from_mapping({"method": method, "budget": budget, "overrides": overrides})
        except ConfigError as exc:
            raise PluginConfigError(f"plugin settings: {exc}") from None
    spec = variant.spec if variant is not None else None
    if spec is not None and spec.needs_budget and budget is None and b0 is None:
        raise PluginConfigError(f"method {method} needs a budget: set ACCEPTMOE_BUDGET=B (top_k <= B <= E)")
    p_hat, commitment = _floats("p_hat", vals.get("p_hat")), vals.get("commitment") or None
    if spec is not None and spec.needs_commitment and p_hat is None:
        if commitment is None:
            raise PluginConfigError(f"method {method} needs commitment probabilities: set ACCEPTMOE_COMMITMENT to a "
                                    f"commitment table calibrated on Standard SD traces (acceptmoe calibrate)")
        try:
            p_hat = CommitmentTable.load(commitment).p_hat
        except (OSError, ValueError, KeyError) as exc:
            raise PluginConfigError(f"ACCEPTMOE_COMMITMENT={commitment}: cannot read the commitment table ({exc})") from None
    if p_hat is not None:
        try:
            SelectorConfig(p_hat=p_hat)
        except ConfigError as exc:
            raise PluginConfigError(f"plugin settings: {exc}") from None
    max_records = _int("max_records", vals.get("max_records", 4096))
    if max_records < 1:
        raise PluginConfigError(f"ACCEPTMOE_MAX_RECORDS must be >= 1, got {max_records}")
    verifier = vals.get("verifier") or "auto"
    if verifier not in GRAPH_VERIFIERS:
        raise PluginConfigError(f"ACCEPTMOE_VERIFIER={verifier!r} is not a verifier backend; valid: {', '.join(GRAPH_VERIFIERS)}")
    return PluginConfig(variant=variant, b0=b0, selector=selector, commitment=commitment, p_hat=p_hat,
                        cost=cost if spec is not None and spec.admits else None, trace=vals.get("trace") or None,
                        max_records=max_records, verifier=verifier,
                        force_decode=_bool("force_decode", vals.get("force_decode", False)),
                        dump=vals.get("dump") or None)


def for_plan(plan: Plan, trace: str | None = None, dump: str | None = None) -> PluginConfig:
    """The settings under which the plugin runs `plan` (bound again inside SGLang's worker to the same plan): its
    variant (none for a method that does not speculate), the budget and p_hat it was bound with, the base
    selector; `trace` and `dump` as given."""
    v, base = plan.variant, plan.selector
    return PluginConfig(variant=v if plan.spec.speculates else None, b0=plan.budget if v.budget is None else None,
                        p_hat=base.p_hat, selector=dataclasses.replace(base, budget=None, p_hat=None), cost=plan.cost,
                        trace=trace, dump=dump)


def restart_reason(old: PluginConfig, new: PluginConfig, fit: Fit, captured: bool) -> str | None:
    """Why a server whose plugin runs `old` cannot take `new` by reading its settings file again (None: it can).
    Before any verify graph is captured (a CPU, or CUDA graphs off) every setting is read again. A captured graph
    holds whether the plugin restricts and records, the test switches, and the verifier and its calls: only what a
    step writes before its graph replays may change (`kernels.verifier.same_calls`: p_hat, beta, level_exponent)."""
    if not captured:
        return None
    for what in ("restricts", "admits", "measures", "recording", "verifier", "force_decode"):
        if getattr(old, what) != getattr(new, what):
            return f"{what} differs ({getattr(old, what)} -> {getattr(new, what)}) and a captured graph holds it"
    if new.restricts and not same_calls(old.bind(fit), new.bind(fit)):
        return (f"{old.variant.name} and {new.variant.name} make other verifier calls (a captured graph holds them; "
                f"only p_hat, beta and level_exponent may change)")
    return None


def server_restart(running: Plan | None, plan: Plan, graphs: bool) -> str | None:
    """Why a server running `running` (None: no server yet) must be replaced to run `plan`, or None: EAGLE-3 is
    on for one plan and off for the other (Vanilla AR), or `restart_reason` (`graphs`: verify passes are captured
    as CUDA graphs) finds the plugin's settings cannot change in place. A backend records every plan it runs."""
    if running is None:
        return "no server is running"
    if running.spec.speculates != plan.spec.speculates:
        return "EAGLE-3 is on for one plan and off for the other"
    return restart_reason(for_plan(running), for_plan(plan), plan.fit, graphs)


def settings(cfg: PluginConfig) -> dict[str, str]:
    """The settings file's mapping (lower-case keys) that reproduces `cfg`; unset keys are empty strings."""
    return {k.removeprefix(PREFIX).lower(): v for k, v in to_env(cfg).items()}


def to_env(cfg: PluginConfig) -> dict[str, str]:
    """Environment variables that reproduce `cfg` in another process (unset keys are empty strings)."""
    v = cfg.variant
    base = {k: x for k, x in dataclasses.asdict(cfg.selector).items() if k not in ("budget", "p_hat")}
    values = {"method": v.method if v else None, "budget": v.budget if v else None, "b0": cfg.b0,
              "beta": dict(v.overrides).get("beta") if v else None, "prune": False,
              "selector": json.dumps(base, sort_keys=True) if cfg.selector != SelectorConfig() else None,
              "commitment": cfg.commitment, "p_hat": cfg.p_hat, "trace": cfg.trace, "max_records": cfg.max_records,
              "cost": json.dumps(cfg.cost.to_json(), sort_keys=True) if cfg.cost is not None else None,
              "verifier": cfg.verifier, "force_decode": cfg.force_decode, "dump": cfg.dump}
    out = {}
    for key, value in values.items():
        if isinstance(value, tuple):
            value = ",".join(repr(x) for x in value)
        out[PREFIX + key.upper()] = "" if value is None else ("1" if value is True else "0" if value is False
                                                              else str(value))
    return out


class Watched:
    """The settings as a server process sees them over its life: `load_config(env)` at start, and again when the
    file named by ACCEPTMOE_SGLANG_CONFIG was replaced (its inode, size or modification time changed; the
    backend writes a new file and renames it over the old one between generations). A look costs one stat."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self.env = os.environ if env is None else env
        self.seen = self._signature()
        self.cfg = load_config(self.env)

    def _signature(self) -> tuple | None:
        try:
            st = os.stat(self.env[ENV_FILE])
        except (KeyError, OSError):
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def poll(self) -> PluginConfig | None:
        """The settings read again when the file changed since the last look, else None."""
        seen = self._signature()
        if seen == self.seen:
            return None
        self.seen, self.cfg = seen, load_config(self.env)
        return self.cfg


def _read_file(path: Path) -> dict:
    if not path.is_file():
        raise PluginConfigError(f"{ENV_FILE}={path}: no such file; point it at a JSON or YAML settings file")
    if path.suffix in (".yaml", ".yml"):
        data = read_mapping(path, PluginConfigError)
    else:
        try:
            data = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise PluginConfigError(f"{path}: cannot parse the plugin settings ({exc}); fix the JSON") from None
    if not isinstance(data, dict):
        raise PluginConfigError(f"{path}: the plugin settings must be a mapping of {', '.join(KEYS)}")
    return {str(k).lower(): v for k, v in data.items()}


def _selector(v) -> SelectorConfig:
    """The base selector from a mapping (settings file) or its JSON text (environment)."""
    if v is None or v == "":
        return SelectorConfig()
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError as exc:
            raise PluginConfigError(f"ACCEPTMOE_SELECTOR is not a JSON mapping ({exc})") from None
    fields = [f.name for f in dataclasses.fields(SelectorConfig) if f.name not in ("budget", "p_hat")]
    if not isinstance(v, dict) or set(v) - set(fields):
        raise PluginConfigError(f"ACCEPTMOE_SELECTOR must map selector fields ({', '.join(fields)}) to values, "
                                f"got {v!r}")
    try:
        return SelectorConfig(**v)
    except ConfigError as exc:
        raise PluginConfigError(f"ACCEPTMOE_SELECTOR: {exc}") from None


def _cost(v) -> VerifyCost | None:
    """A verify-cost profile: a profile file's path, its `cost` mapping, or that mapping's JSON text."""
    if v is None or v == "":
        return None
    if isinstance(v, str) and not v.lstrip().startswith("{"):
        try:
            data = json.loads(Path(v).read_text())
            return _checked_cost(VerifyCost.from_json(data.get("cost", data)))   # a profile file: under "cost"
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PluginConfigError(f"ACCEPTMOE_COST={v}: cannot read the verify-cost profile ({exc})") from None
    try:
        data = json.loads(v) if isinstance(v, str) else dict(v)
        return _checked_cost(VerifyCost.from_json(data))
    except (ValueError, TypeError, KeyError) as exc:
        raise PluginConfigError(f"ACCEPTMOE_COST must be a profile file or its cost mapping as JSON ({exc})") from None


def _checked_cost(cost: VerifyCost) -> VerifyCost:
    """The profile's numbers are numbers: non-negative seconds, at least one byte and one MoE layer."""
    for name in ("fixed_s", "per_token_s", "per_byte_s", "fetch_per_byte_s", "expert_bytes", "moe_layers"):
        x = getattr(cost, name)
        if x is None and name == "fetch_per_byte_s":
            continue
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not x >= (1 if name in ("expert_bytes", "moe_layers") else 0):
            raise ValueError(f"{name} must be a {'whole number >= 1' if name in ('expert_bytes', 'moe_layers') else 'number >= 0'}, got {x!r}")
    return cost


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
