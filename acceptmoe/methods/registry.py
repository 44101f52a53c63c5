"""The method registry: each method once, as a `MethodSpec` built from the enums every backend maps.

A method is three choices (docs/method.md, "Verifier-side selectors"):

| method        | score (what a block sums, `Score`) | root anchor | size (`Sizing`)                 |
|---------------|------------------------------------|-------------|---------------------------------|
| `vanilla-ar`  | - (no verification pass)           | -           | `NONE`                          |
| `standard-sd` | `GATE_MASS` (reported only)        | no          | `ALL`: every expert             |
| `count-b`     | `VOTES`, ties by gate mass         | no          | `FIXED`: the budget B           |
| `moe-spec`    | `ROUTER_MASS`                      | no          | `FIXED`                         |
| `acceptmoe-b` | `COMMITMENT`                       | yes         | `FIXED` (anchor counted in B)   |
| `acceptmoe`   | `COMMITMENT`                       | yes         | `SELF`: abs(A) + effective rank |
| `acceptmoe-shared` | `SHARED_COMMITMENT`           | yes         | `SELF`                          |

A fourth choice, the draft side (`Admission`: docs/method.md, "Token-side admission"), decides which drafted
nodes the pass verifies: every one (`ALL`, the paper's methods) or a survival-ranked, ancestor-closed prefix under
a verify-cost model (`SURVIVAL`, `PREFIX`, `COSTED`; one rule each in `methods.admission.RULES`). The admitting
entries (`standard-sd-survival`, ..., `acceptmoe-costed`) are beyond the paper, and their verifiers are their
selectors' (`verifier_methods()` lists the methods whose verify passes differ).

Every backend (the readable reference in `reference.py`, the torch, cpu and Triton verifiers in
`acceptmoe.kernels`) implements each `Score` and each `Sizing` member once, for any combination, and
declares what it maps with `register_backend` when its module loads. A method that a loaded backend
cannot serve is an error naming the method, the backend and the missing member: at the backend's import
for the registered methods, at `register_method` for a method added later (both tables, `METHODS` and
`BACKENDS`, are `acceptmoe.registry.Registry`s whose check runs these tests). Nothing dispatches on a method's
name. A method's part in the experiments is data on its record: its `roles` (`Role`: the reference, the baseline,
the calibration source, the method whose traces set B0, the default), each held by exactly one method (checked
when a method registers and once the built-ins are in), and its declared counterparts (`budget_twin`, `alone`),
checked against their definitions at registration. The role constants below (`BASELINE`, `B0_METHOD`, ...) read
the records; they are the only names code outside this room refers to (tests/architecture/test_method_names.py).

The target's routing function is one record of axes (`routing.Router`: `Scoring`, `Order`, a selection bias,
group-limited choice, renormalisation, a scale; docs/method.md, "Router kinds"): any model may come with any
value of any axis, so a backend maps every value of every axis in `ROUTING_AXES`, checked by `register_backend`
at its import like the scores and sizings, and a router is data (a new combination of values), never code.
"""
from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from acceptmoe.registry import Registry, UnknownName


class Score(enum.Enum):
    """What a method's block score sums over the block's tokens; the method ranks experts by it."""
    GATE_MASS = "gate-mass"        # sum_t r[t, e]: natural gate mass (Standard SD reports it, ranks nothing)
    VOTES = "votes"                # sum_t 1[e in K_t], ties by gate mass, then lower index
    ROUTER_MASS = "router-mass"    # sum_t softmax(z_t)[e], over all experts (MoE-Spec)
    COMMITMENT = "commitment"      # sum_t alpha_t r[t, e], alpha_t = p_hat[d_t]^beta N_{d_t}^level_exponent
    SHARED_COMMITMENT = "shared-commitment"   # COMMITMENT plus the terms of the pass's other roots (alpha 1)

    @property
    def weighs_commitment(self) -> bool:
        """Its terms carry the commitment weights alpha_t (it needs p_hat)."""
        return self in (Score.COMMITMENT, Score.SHARED_COMMITMENT)

    @property
    def credits_batch(self) -> bool:
        """A block's score also sums the root terms of the pass's other blocks (docs/method.md, "Batch-shared
        commitment"): at one block per pass it is the score without them."""
        return self is Score.SHARED_COMMITMENT

    @property
    def alone(self) -> Score:
        """The score without the batch's terms (itself unless it credits the batch): what it is at B = 1."""
        return Score.COMMITMENT if self is Score.SHARED_COMMITMENT else self


class Sizing(enum.Enum):
    """How many experts S holds."""
    NONE = "none"      # no verification pass (Vanilla AR)
    ALL = "all"        # S = every expert
    FIXED = "fixed"    # the budget B, the anchor counted in it
    SELF = "self"      # abs(A) + n_er, the effective rank of the residual (non-anchor) demand


class Admission(enum.Enum):
    """Which drafted nodes the verify pass admits (the draft-side axis; docs/method.md, "Token-side admission"):
    the admitted set is always ancestor-closed, a prefix of the nodes ranked by survival. It only truncates
    the tree, so with `Sizing.ALL` a method stays lossless."""
    ALL = "all"              # every drafted node (the paper's methods)
    SURVIVAL = "survival"    # top-n by survival, n maximising (1 + expected accepted) / (fixed + per-token cost)
    PREFIX = "prefix"        # the prefix maximising expected tokens per modeled verify cost, experts included
    COSTED = "costed"        # the prefix whose acceptance gain beats the tokens and the method's experts it adds

    @property
    def truncates(self) -> bool:
        """It may drop drafted nodes (needs a verify-cost profile)."""
        return self is not Admission.ALL

    @property
    def models_experts(self) -> bool:
        """Its cost counts the experts the pass reads (it needs each pass's measured unions)."""
        return self in (Admission.PREFIX, Admission.COSTED)


class UnknownRouterError(UnknownName, ValueError):
    """A router preset name that `routing.ROUTER_PRESETS` does not have; the message names the closest and the
    valid ones."""


class Scoring(enum.Enum):
    """How a router scores its experts (docs/method.md, "Router kinds")."""
    SOFTMAX = "softmax"      # softmax over the scored experts
    SIGMOID = "sigmoid"      # a sigmoid per expert


class Order(enum.Enum):
    """Whether the score comes before the top-k (it ranks the scores) or after it (it ranks the logits)."""
    SCORE_THEN_TOPK = "score_then_topk"   # score every expert, top-k by score (Qwen3-MoE, DeepSeek-V3)
    TOPK_THEN_SCORE = "topk_then_score"   # top-k of the logits, score the chosen k (GPT-OSS, Llama 4)


# The router's axes (`routing.Router`) and every value each takes: a backend maps each value of each axis once
# (a table keyed by them) and declares the tables' keys to `register_backend`, checked at its import.
ROUTING_AXES: dict[str, tuple] = {
    "scoring": tuple(Scoring),
    "order": tuple(Order),
    "biased": (False, True),        # a per-layer selection bias added to what the choice ranks
    "grouped": (False, True),       # group-limited choice: the token's `group_top` of `groups` groups first
    "renormalize": (False, True),   # the chosen experts' scores divided by their sum
}


class Role(enum.Enum):
    """A part one method plays in the experiments; exactly one registered method holds each."""
    REFERENCE = "reference"        # relative accuracy change is taken against it (no verification pass)
    BASELINE = "baseline"          # accuracy differences and throughput ratios are taken against it
    CALIBRATION = "calibration"    # p_hat is counted from its natural-routing traces
    SETS_B0 = "sets-b0"            # its traces give B0, the matched budget of the fixed-budget methods
    DEFAULT = "default"            # what runs where a caller names no method (the lm-eval backend, benchmarks)


@dataclass(frozen=True)
class MethodSpec:
    name: str
    sizing: Sizing
    score: Score | None       # None only for Sizing.NONE
    anchor: bool = False      # the root's natural top-k set A is always in S
    label: str = ""           # display name in tables and figures
    prunes_when_offloaded: bool = False   # residency-aware pruning by default under an offloaded store
    roles: frozenset[Role] = frozenset()  # its parts in the experiments (`Role`), each held by one method only
    budget_twin: str = ""     # the fixed-budget method ranking like it (registered before it): its sizing at B
    alone: str = ""           # a batch-crediting method: the method it is at one block per pass
    beyond_paper: bool = False   # not one of the paper's six methods: Table 1 runs it only when asked
    admission: Admission = Admission.ALL   # the draft nodes the verify pass admits (`Admission`)

    def __post_init__(self) -> None:
        if (self.sizing is Sizing.NONE) != (self.score is None):
            raise ValueError(f"method {self.name!r}: a score goes with a verification pass (sizing NONE <=> "
                             f"score None), got sizing {self.sizing} and score {self.score}")
        if self.anchor and not self.restricts:
            raise ValueError(f"method {self.name!r}: an anchor only means something for a restricting sizing")
        if self.prunes_when_offloaded and not self.restricts:
            raise ValueError(f"method {self.name!r}: residency pruning applies to restricting methods only")
        if self.admission.truncates and not self.speculates:
            raise ValueError(f"method {self.name!r}: admission truncates a draft tree; a method without one admits "
                             f"nothing (Admission.ALL)")
        if bool(self.alone) != bool(self.score is not None and self.score.credits_batch):
            raise ValueError(f"method {self.name!r}: a method whose score credits the batch names the method it is "
                             f"alone (`alone`), and only such a method does")

    @property
    def speculates(self) -> bool:
        """Drafts a tree and verifies it (False: plain greedy decoding)."""
        return self.sizing is not Sizing.NONE

    @property
    def admits(self) -> bool:
        """Truncates the draft tree before verifying it (`Admission.truncates`): needs a verify-cost profile."""
        return self.admission.truncates

    @property
    def sets_b0(self) -> bool:
        """Its traces give the pair's B0 (`Role.SETS_B0`)."""
        return Role.SETS_B0 in self.roles

    @property
    def restricts(self) -> bool:
        """Verification routes inside a selected subset of experts."""
        return self.sizing in (Sizing.FIXED, Sizing.SELF)

    @property
    def routes_naturally(self) -> bool:
        """Verifies with the target's own routing, every expert eligible (its traces are natural routing)."""
        return self.speculates and not self.restricts

    @property
    def needs_budget(self) -> bool:
        return self.sizing is Sizing.FIXED

    @property
    def needs_commitment(self) -> bool:
        """Needs p_hat (commitment probabilities per depth)."""
        return self.score is not None and self.score.weighs_commitment

    @property
    def needs_calibration(self) -> bool:
        """Needs calibration before it runs: p_hat for its own score, or B0 for its budget (B0's method is
        scored with p_hat)."""
        return self.needs_commitment or self.needs_budget


class UnknownMethodError(UnknownName):
    """A method name the registry does not have; the message names the closest and the valid ones."""


class BackendCoverageError(RuntimeError):
    """A registered method that a loaded backend cannot serve (a programming error, raised at import)."""


def axis_value(value) -> str:
    """An axis value as messages name it (`SIGMOID`, `True`)."""
    return value.name if isinstance(value, enum.Enum) else str(value)


@dataclass(frozen=True)
class Coverage:
    """What one backend implements: the scores and sizings it maps (every combination of them), and the values
    of each routing axis (every combination of them: `ROUTING_AXES`)."""
    scores: frozenset[Score]
    sizings: frozenset[Sizing]
    routing: tuple[tuple[str, frozenset], ...] = ()     # (axis, the values it maps), per axis

    def missing(self, spec: MethodSpec) -> list[str]:
        """What this backend lacks for `spec` (nothing for a method without a verification pass)."""
        if not spec.speculates:
            return []
        assert spec.score is not None                 # a verification pass has a score (MethodSpec.__post_init__)
        out = [] if spec.score in self.scores else [f"score {spec.score.name}"]
        return out + ([] if spec.sizing in self.sizings else [f"sizing {spec.sizing.name}"])

    def unmapped(self, values: dict[str, object] | None = None) -> list[str]:
        """The routing axis values this backend lacks, as `axis=VALUE`: of every axis (`ROUTING_AXES`), or of
        one router's (`values`: axis -> its value, `routing.Router.axes`)."""
        mapped = dict(self.routing)
        wanted = ROUTING_AXES.items() if values is None else ((a, (v,)) for a, v in values.items())
        return [f"{axis}={axis_value(v)}" for axis, vs in wanted for v in vs if v not in mapped.get(axis, ())]


def _served_everywhere(name: str, spec: MethodSpec) -> None:
    if name != spec.name:
        raise ValueError(f"method {spec.name!r} registered as {name!r}")
    _check_parts(spec)
    for backend, coverage in BACKENDS.items():
        _refuse_unserved(backend, coverage, spec)


def _check_parts(spec: MethodSpec) -> None:
    """A new method's roles are free and its declared counterparts are what their definitions say."""
    for role in spec.roles:
        holder = next((n for n, s in METHODS.items() if role in s.roles), None)
        if holder is not None:
            raise ValueError(f"method {spec.name!r} claims role {role.name}, which {holder!r} holds; exactly one "
                             f"method holds each role")
    if spec.budget_twin:
        twin = METHODS.get(spec.budget_twin)
        if twin is None or not twin.needs_budget or (twin.score, twin.anchor) != (spec.score, spec.anchor):
            raise ValueError(f"method {spec.name!r}: its budget_twin {spec.budget_twin!r} must be a registered "
                             f"fixed-budget method with the same score and anchor")
    if spec.alone:
        alone = METHODS.get(spec.alone)
        assert spec.score is not None                  # `alone` goes with a batch-crediting score (__post_init__)
        if alone is None or (alone.score, alone.sizing, alone.anchor) != (spec.score.alone, spec.sizing, spec.anchor):
            raise ValueError(f"method {spec.name!r}: its alone method {spec.alone!r} must be a registered method "
                             f"with its sizing, its anchor and the score without the batch's terms")


def holder(role: Role) -> str:
    """The one registered method that holds `role`."""
    held = [n for n, s in METHODS.items() if role in s.roles]
    if len(held) != 1:
        raise BackendCoverageError(f"role {role.name} is held by {held or 'no method'}; exactly one method holds it")
    return held[0]


def _serves_every_method(name: str, coverage: Coverage) -> None:
    missing = coverage.unmapped()
    if missing:
        raise BackendCoverageError(f"backend {name!r} maps no router axis value {' and no '.join(missing)}; "
                                   f"implement it there (every backend maps every value of every routing axis, "
                                   f"ROUTING_AXES)")
    for spec in METHODS.values():
        _refuse_unserved(name, coverage, spec)


# method name -> MethodSpec, in registration order; a method is checked against every loaded backend
METHODS: Registry[MethodSpec] = Registry("method", check=_served_everywhere, error=UnknownMethodError)
# verifier backend name -> what it maps (filled as backend modules load; the factories are `kernels.VERIFIERS`)
BACKENDS: Registry[Coverage] = Registry("verifier backend", check=_serves_every_method)


def get_method(name: str) -> MethodSpec:
    """The method called `name`; a miss is an `UnknownMethodError` naming the closest."""
    return METHODS[name]


def register_backend(name: str, scores: Collection[Score], sizings: Collection[Sizing],
                     routing: Mapping[str, Collection]) -> None:
    """Declare what backend `name` maps; every registered method it cannot serve raises, naming it, and so
    does every routing axis value it lacks (`routing`: axis -> the values its table for that axis maps).

    Called once at the backend module's import, with the keys of the backend's own implementation tables,
    so a `Score`, `Sizing` or routing axis value added without an implementation fails the import, never a
    run."""
    axes = tuple((axis, frozenset(routing.get(axis, ()))) for axis in ROUTING_AXES)
    BACKENDS.add(name, Coverage(frozenset(scores), frozenset(sizings), axes))


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add a method; every backend loaded so far must serve it (backends loaded later check at import)."""
    return METHODS.add(spec.name, spec)


def unregister_method(name: str) -> None:
    """Remove a method added with `register_method` (tests that add a toy method clean up with it)."""
    if name in _BUILTIN:
        raise ValueError(f"method {name!r} is one of the built-in methods")
    METHODS.remove(name)


def _refuse_unserved(backend: str, coverage: Coverage, spec: MethodSpec) -> None:
    missing = coverage.missing(spec)
    if missing:
        raise BackendCoverageError(f"backend {backend!r} cannot serve method {spec.name!r}: it maps no "
                                   f"{' and no '.join(missing)}; implement it there (every backend maps every "
                                   f"Score and Sizing member)")


def verifier_methods() -> tuple[str, ...]:
    """The speculating methods whose verify passes differ in their selector: every one but those that admit
    draft nodes (an admitting method's verifier is its selector's; admission only shapes the tree it gets)."""
    return tuple(n for n, s in METHODS.items() if s.speculates and not s.admits)


def fixed_twin(name: str) -> str:
    """The fixed-budget method that ranks like `name` (AcceptMoE -> AcceptMoE-B; `MethodSpec.budget_twin`)."""
    spec = get_method(name)
    if not spec.budget_twin:
        raise ValueError(f"method {name!r} declares no fixed-budget counterpart (budget_twin)")
    return spec.budget_twin


def alone_twin(name: str) -> str | None:
    """The method a batch-crediting one (`Score.credits_batch`) is at one block per pass (`MethodSpec.alone`;
    AcceptMoE (batch-shared) -> AcceptMoE). None for a method whose sets one request determines."""
    return get_method(name).alone or None


for _spec in (
    MethodSpec("vanilla-ar", Sizing.NONE, None, label="Vanilla AR", roles=frozenset({Role.REFERENCE})),
    MethodSpec("standard-sd", Sizing.ALL, Score.GATE_MASS, label="Standard SD",
               roles=frozenset({Role.BASELINE, Role.CALIBRATION})),
    MethodSpec("count-b", Sizing.FIXED, Score.VOTES, label="Count-B"),
    MethodSpec("moe-spec", Sizing.FIXED, Score.ROUTER_MASS, label="MoE-Spec"),
    MethodSpec("acceptmoe-b", Sizing.FIXED, Score.COMMITMENT, anchor=True, label="AcceptMoE-B"),
    MethodSpec("acceptmoe", Sizing.SELF, Score.COMMITMENT, anchor=True, label="AcceptMoE",
               prunes_when_offloaded=True, roles=frozenset({Role.SETS_B0, Role.DEFAULT}), budget_twin="acceptmoe-b"),
    MethodSpec("acceptmoe-shared", Sizing.SELF, Score.SHARED_COMMITMENT, anchor=True, label="AcceptMoE (batch-shared)",
               prunes_when_offloaded=True, alone="acceptmoe", beyond_paper=True),
    # token-side admission (docs/method.md, "Token-side admission"): the draft-side axis on the same selectors
    MethodSpec("standard-sd-survival", Sizing.ALL, Score.GATE_MASS, label="Standard SD (survival admission)",
               admission=Admission.SURVIVAL, beyond_paper=True),
    MethodSpec("standard-sd-prefix", Sizing.ALL, Score.GATE_MASS, label="Standard SD (prefix admission)",
               admission=Admission.PREFIX, beyond_paper=True),
    MethodSpec("acceptmoe-survival", Sizing.SELF, Score.COMMITMENT, anchor=True,
               label="AcceptMoE (survival admission)", prunes_when_offloaded=True, admission=Admission.SURVIVAL,
               beyond_paper=True),
    MethodSpec("acceptmoe-costed", Sizing.SELF, Score.COMMITMENT, anchor=True, label="AcceptMoE (expert-cost admission)",
               prunes_when_offloaded=True, admission=Admission.COSTED, beyond_paper=True),
):
    register_method(_spec)
_BUILTIN = frozenset(METHODS)

# each role's one holder, read from the records (`holder` raises at import if a role has none or two)
REFERENCE, BASELINE, CALIBRATION, B0_METHOD, DEFAULT_METHOD = (holder(r) for r in (
    Role.REFERENCE, Role.BASELINE, Role.CALIBRATION, Role.SETS_B0, Role.DEFAULT))
PAPER_METHODS: tuple[str, ...] = tuple(n for n, s in METHODS.items() if not s.beyond_paper)   # Table 1's default
