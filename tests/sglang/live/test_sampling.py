"""Sampling through the SGLang backend on this CPU: SGLang's EAGLE verify commits the argmax here whatever the
temperature (`eagle_utils._verify_uses_greedy`), so the backend declares sampling on CUDA only and refuses
temperature > 0 on a CPU with one error naming why and the fix, before a run starts and inside one; greedy
requests, now sent with per-request sampling params, still give the native engine's tokens. gpu-check's
SGLang sampling stage runs its child process here up to that refusal (the exactness test itself needs CUDA)."""
import torch

from acceptmoe.cli import main
from acceptmoe.engine import GenerationOptions, TreeShape, load_engine
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.engines import check_engine
from acceptmoe.methods import Variant
from acceptmoe.serving.sglang.engine import SGLangBackend, open_engine, sampling_params

from common import CPU_ARGS, PROMPTS, ROOT, TARGET

TREE = TreeShape(3, 4, 12)


def test_sampling_params_carry_the_options():
    assert sampling_params(GenerationOptions(ignore_eos=True), 8) == \
        {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True}
    assert sampling_params(GenerationOptions(temperature=0.6, top_p=0.9, seed=3), 8) == \
        {"temperature": 0.6, "max_new_tokens": 8, "ignore_eos": False, "top_k": -1, "top_p": 0.9, "sampling_seed": 3}
    assert sampling_params(GenerationOptions(temperature=1.0, top_k=20), 4)["top_k"] == 20


def test_sglang_samples_on_cuda_only_and_a_cpu_run_is_refused_before_it_starts(capsys):
    assert SGLangBackend.capabilities.samples_on("cuda") and not SGLangBackend.capabilities.samples_on("cpu")
    check_engine("sglang", sampling_on="cuda:0")
    try:
        check_engine("sglang", sampling_on="cpu")
        raise AssertionError("sampling on the CPU was not refused")
    except UserError as exc:
        assert "does not sample exactly on cpu" in str(exc) and "native" in str(exc)
    assert main(["table1", "--engine", "sglang", "--temperature", "1", "--limit", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "temperature 0" in err[0]


def test_greedy_unchanged_and_sampling_refused_in_a_cpu_backend():
    native = load_engine(ROOT / "models" / "tiny", tree=TREE)
    sd = Variant("standard-sd")
    want = [native.generate(p, sd.bind(native.fit), 8, GenerationOptions(ignore_eos=True)).tokens for p in PROMPTS]
    backend = open_engine(TARGET, TARGET.parent / "draft", device="cpu", dtype=torch.float32, tree=TREE,
                          **{k: v for k, v in CPU_ARGS.items() if k in ("skip_tokenizer_init", "log_level")})
    try:
        plan = sd.bind(backend.fit)
        options = [GenerationOptions(ignore_eos=True, seed=s) for s in range(len(PROMPTS))]   # greedy, per request
        assert [g.tokens for g in backend.generate_many(PROMPTS, plan, 8, options)] == want
        try:
            backend.generate(PROMPTS[0], plan, 8, GenerationOptions(temperature=1.0, seed=1))
            raise AssertionError("temperature 1 was not refused on the CPU")
        except UserError as exc:
            assert "commits the argmax" in str(exc) and "--engine native" in str(exc) and "\n" not in str(exc)
    finally:
        backend.close()


def test_gpu_checks_sglang_stage_runs_its_child_up_to_the_cpu_refusal():
    from acceptmoe.tools.gpucheck.sglang_sampling import check_sglang_sampling
    check = check_sglang_sampling(ROOT / "models" / "tiny", "cpu", n=4)
    assert check["verdict"] == "FAIL" and "commits the argmax" in check["reason"]
