"""SGLang entry point (`sglang.srt.plugins`: `acceptmoe`): registers the hooks that run AcceptMoE verification.

SGLang calls `load()` in every process it starts (engine, scheduler/TP workers, detokenizer), then applies the
registered hooks. No installed SGLang file is edited. The hooks:

| target                                           | kind   | what                                             |
|--------------------------------------------------|--------|--------------------------------------------------|
| `ModelRunner.forward`                            | AROUND | target TARGET_VERIFY pass: trees from `EagleVerifyInput` into static buffers; after it, snapshot the layer records |
| `DecodeCudaGraphRunner.capture`                  | AROUND | a target TARGET_VERIFY graph captures the restricted routing |
| `TopK.forward`                                   | AROUND | target layers of those passes: mask router logits outside each request's set (Eq. 2) |
| `eagle_utils.eagle_sample`                       | AFTER  | accepted paths and accept lengths per request -> routing records |
| `eagle_utils.organize_draft_results`             | AFTER  | an admitting method: the drafted nodes' survival (`admission`) |
| `eagle_utils._verify_uses_greedy` (CPU only)     | AROUND | verify at temperature > 0 samples as on CUDA (`cpu.sampling`) |

Draft layers (`TopK.is_draft`), the draft worker, prefill and plain decode passes pass through untouched
(plain decode is restricted only under the test switch `ACCEPTMOE_FORCE_DECODE`). With no method and no trace
file set, every hook passes straight through. Before each target pass the forward hook looks (one stat) whether
the settings file was replaced and, if so, hands the runtime the new settings (`config.Watched`): a backend
serves consecutive plans from one server by rewriting that file between generations.
"""
from __future__ import annotations

import logging

from acceptmoe.methods import Router

from .config import PluginConfigError, Watched
from .routers import check_routers
from .runtime import Limits, Runtime

log = logging.getLogger("acceptmoe.sglang")
RUNTIME: Runtime | None = None

TARGETS = {
    "forward": "sglang.srt.model_executor.model_runner.ModelRunner.forward",
    "capture": "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.capture",
    "topk": "sglang.srt.layers.moe.topk.TopK.forward",
    "sample": "sglang.srt.speculative.eagle_utils.eagle_sample",
    "draft": "sglang.srt.speculative.eagle_utils.organize_draft_results",
}


def load() -> None:
    """Validate the settings (a bad setting stops the process with one clear message) and register the hooks."""
    global RUNTIME
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    try:
        settings = Watched()
    except PluginConfigError as exc:
        # SGLang logs and skips a plugin that raises an Exception; a server must not run unrestricted when the
        # user asked for a method, so stop the process with the message instead.
        log.error("acceptmoe plugin: %s", exc)
        raise SystemExit(f"error: acceptmoe plugin: {exc}") from None
    RUNTIME = Runtime(settings.cfg, source=settings)
    HookRegistry.register(TARGETS["forward"], _around_forward, HookType.AROUND)
    HookRegistry.register(TARGETS["capture"], _around_capture, HookType.AROUND)
    HookRegistry.register(TARGETS["topk"], _around_topk, HookType.AROUND)
    HookRegistry.register(TARGETS["sample"], _after_sample, HookType.AFTER)
    HookRegistry.register(TARGETS["draft"], _after_draft, HookType.AFTER)
    from sglang.srt.utils import is_cpu
    if is_cpu():                                         # SGLang's sampling verify on the CPU engine
        from .cpu import sampling
        sampling.install(HookRegistry, HookType)
    log.info("acceptmoe plugin loaded: %s", RUNTIME.cfg.describe())


def _active() -> bool:
    return RUNTIME is not None and RUNTIME.active


def served_moe(runner) -> tuple[Router | None, int]:
    """The served target's router and routed experts per MoE layer, read from its Hugging Face config by the
    project's own parser (`acceptmoe.engine.config.ModelConfig`, through its model family:
    `acceptmoe.engine.families`); (None, 0) for a model type no family serves, which keeps SGLang's reading of
    it (`routers.router_of` maps SGLang's own `TopKConfig` and checks it against the family's router)."""
    from acceptmoe.engine.config import ModelConfig
    from acceptmoe.engine.families import FAMILIES

    hf = getattr(getattr(runner, "model_config", None), "hf_config", None)
    raw = hf.to_dict() if hf is not None else {}
    if raw.get("model_type") not in FAMILIES:
        return None, 0
    moe = ModelConfig.from_dict(raw).moe
    return moe.router, int(moe.num_experts)


def limits_of(runner, graph_max_bs: int = 0) -> Limits:
    """The server's limits from its model runner: rows for every pass it can run, the tree depth, the TP rank,
    the served model's router (every MoE layer's checked against it, `routers.check_routers`)."""
    server = getattr(runner, "server_args", None)
    pool = getattr(getattr(runner, "req_to_token_pool", None), "size", 0) or 0
    rows = max(int(pool), int(getattr(runner, "max_running_requests", 0) or 0),
               int(getattr(server, "max_running_requests", 0) or 0), int(graph_max_bs), 1)
    depth = max(1, int(getattr(server, "speculative_num_steps", 0) or 1))
    try:
        from sglang.srt.runtime_context import get_parallel
        rank = int(get_parallel().tp_rank)
    except Exception:  # noqa: BLE001 - no parallel context (a runner built by hand)
        rank = int(getattr(runner, "tp_rank", 0) or 0)
    router, experts = served_moe(runner)
    check_routers(getattr(runner, "model", None), router)        # an unsupported router: refused by name now
    return Limits(rows, depth, rank, router, experts)


def _around_forward(orig, runner, forward_batch, *args, **kwargs):
    if RUNTIME is None or getattr(runner, "is_draft_worker", False):
        return orig(runner, forward_batch, *args, **kwargs)
    RUNTIME.refresh()                                    # the settings file replaced between generations
    if not RUNTIME.active:
        return orig(runner, forward_batch, *args, **kwargs)
    mode = forward_batch.forward_mode
    verify_input = getattr(forward_batch, "spec_info", None)
    if mode.is_target_verify() and getattr(verify_input, "retrieve_next_token", None) is not None:
        if RUNTIME.limits is None:
            RUNTIME.start(limits_of(runner))
            if str(getattr(runner, "device", "")) == "cpu":
                from .cpu import check_verify_backend
                check_verify_backend(runner)
        RUNTIME.begin_verify(verify_input, forward_batch.batch_size, getattr(forward_batch, "rids", None))
    elif RUNTIME.cfg.force_decode and mode.is_decode():
        RUNTIME.start(limits_of(runner))
        RUNTIME.begin_star(forward_batch.batch_size)
    else:
        return orig(runner, forward_batch, *args, **kwargs)
    try:
        return orig(runner, forward_batch, *args, **kwargs)
    finally:
        RUNTIME.end_pass()
        if RUNTIME.cfg.force_decode and not mode.is_target_verify():
            RUNTIME.finish_step([str(i) for i in range(int(forward_batch.batch_size))], None, 1)


def _around_capture(orig, graph_runner, *args, **kwargs):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    if (RUNTIME is None or graph_runner.model_runner.is_draft_worker
            or graph_runner.capture_forward_mode != ForwardMode.TARGET_VERIFY):
        return orig(graph_runner, *args, **kwargs)
    RUNTIME.captured = True                              # the graphs hold this pass's work from now on
    if not RUNTIME.active:
        return orig(graph_runner, *args, **kwargs)
    RUNTIME.start(limits_of(graph_runner.model_runner, int(getattr(graph_runner, "max_bs", 1))))
    RUNTIME.begin_capture(graph_runner)
    try:
        return orig(graph_runner, *args, **kwargs)
    finally:
        RUNTIME.mode = None


def _around_topk(orig, topk, hidden_states, router_logits, *args, **kwargs):
    if RUNTIME is None or RUNTIME.mode is None:
        return orig(topk, hidden_states, router_logits, *args, **kwargs)
    return RUNTIME.restrict(topk, orig, hidden_states, router_logits, *args, **kwargs)


def _after_draft(result, score_list, token_list, parents_list, *args, **kwargs):
    if _active():
        _, top_scores_index, _ = result
        RUNTIME.draft_scores(score_list, top_scores_index)
    return result


def _after_sample(result, verify_input, batch, *args, **kwargs):
    if _active():
        _, _, accept_index = result
        RUNTIME.finish_step([r.rid for r in batch.reqs], accept_index, int(verify_input.draft_token_num))
    return result
