"""Sampling through the SGLang backend on this CPU. SGLang's EAGLE verify takes its sampling branch here as on
CUDA (`acceptmoe.serving.sglang.cpu.sampling`: SGLang alone commits the argmax on a CPU), with sgl-kernel's tree
rule as torch code (`cpu.ops`, checked against the kernel's rule in test_sampling_ops.py). Here: the options
reach SGLang, greedy requests still give the native engine's tokens (before and after sampled ones), and
Standard SD's first tokens through SGLang have the target's exact law (gpu-check's measurement, run on the
CPU: chi-square at alpha 0.01, its power stated). On a GPU gpu-check's `sglang-sampling` stage runs the same
measurement through the CUDA kernel itself."""
import time

import torch

from acceptmoe.engine import GenerationOptions, TreeShape, load_engine
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.engines import check_engine
from acceptmoe.methods import Variant
from acceptmoe.serving.sglang.engine import SGLangBackend, open_engine, sampling_params

from common import CPU_ARGS, PROMPTS, ROOT, TARGET

TREE = TreeShape(3, 4, 12)
N_EXACT = 1000            # requests of the exactness test (4 chunks of 250 in flight): about 3 minutes here


def test_sampling_params_carry_the_options():
    assert sampling_params(GenerationOptions(ignore_eos=True), 8) == \
        {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True}
    assert sampling_params(GenerationOptions(temperature=0.6, top_p=0.9, seed=3), 8) == \
        {"temperature": 0.6, "max_new_tokens": 8, "ignore_eos": False, "top_k": -1, "top_p": 0.9, "sampling_seed": 3}
    assert sampling_params(GenerationOptions(temperature=1.0, top_k=20), 4)["top_k"] == 20


def test_sglang_samples_on_cuda_and_cpu_and_refuses_other_devices():
    assert SGLangBackend.capabilities.samples_on("cuda") and SGLangBackend.capabilities.samples_on("cpu")
    check_engine("sglang", sampling_on="cpu")
    try:
        check_engine("sglang", sampling_on="mps")
        raise AssertionError("sampling on mps was not refused")
    except UserError as exc:
        assert "does not sample exactly on mps" in str(exc)


def test_greedy_unchanged_and_sampled_requests_served():
    """Greedy requests (each with a seed, per-request options) keep the native engine's tokens; sampled ones run
    through the sampling branch. A request seed does not reproduce a sampled SGLang run: SGLang reads
    `sampling_seed` only under its `enable_deterministic_inference` (sampling_batch_info.py:157-172), which
    refuses the CPU attention backend (docs/sglang.md, "Sampling")."""
    native = load_engine(ROOT / "models" / "tiny", tree=TREE)
    sd = Variant("standard-sd")
    want = [native.generate(p, sd.bind(native.fit), 8, GenerationOptions(ignore_eos=True)).tokens for p in PROMPTS]
    backend = open_engine(TARGET, TARGET.parent / "draft", device="cpu", dtype=torch.float32, tree=TREE,
                          **{k: v for k, v in CPU_ARGS.items() if k in ("skip_tokenizer_init", "log_level")})
    try:
        plan = sd.bind(backend.fit)
        greedy = [GenerationOptions(ignore_eos=True, seed=s) for s in range(len(PROMPTS))]
        assert [g.tokens for g in backend.generate_many(PROMPTS, plan, 8, greedy)] == want
        sampled = [GenerationOptions(ignore_eos=True, temperature=1.0, seed=s) for s in range(len(PROMPTS))]
        assert all(len(g.tokens) == 8 for g in backend.generate_many(PROMPTS, plan, 8, sampled))
        assert [g.tokens for g in backend.generate_many(PROMPTS, plan, 8, greedy)] == want     # same server after
    finally:
        backend.close()


def test_standard_sd_through_sglang_draws_the_targets_exact_law():
    """gpu-check's measurement (`tools.gpucheck.sglang_sampling`) on this CPU: the first 2 tokens of N_EXACT
    Standard SD requests at temperature 1, top-k 6, top-p 0.95 (the second comes from SGLang's verify) against
    the native target's exact law."""
    from acceptmoe.tools.gpucheck.sglang_sampling import check_sglang_sampling
    start = time.perf_counter()
    check = check_sglang_sampling(ROOT / "models" / "tiny", "cpu", n=N_EXACT)
    print(f"\nSGLang CPU exactness: {check} in {time.perf_counter() - start:.0f} s")
    assert check["verdict"] == "PASS", check
    assert check["samples"] == N_EXACT and check["min_detectable_tv"] < 0.1
