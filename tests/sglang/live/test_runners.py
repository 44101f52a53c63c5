"""`./reproduce.sh table1 --engine sglang` on this CPU, small, with two models (the tiny world under two names):
calibration on SGLang's own Standard SD records, B0, Standard SD and AcceptMoE through SGLang's EAGLE-3 worker,
a math-style and a code task graded in this environment.

- Every saved grade equals a fresh grading of the saved reply: between engines SGLang's shutdown kills its
  process's children, and the graders' kept workers must survive that without blaming a reply.
- One server at a time, and as few as the plan allows: per model one server serves calibration and both methods
  (the plugin reads its settings again between generations; no CUDA graph holds them on a CPU), and each starts
  after the last one's scheduler is gone.
- Memory from the run: SGLang's pools are sized for the preset's requests and lengths (stated in config.json and
  engines.jsonl), and its processes together stay under 4 GiB resident (sized from the host, a server for
  this 7M-parameter model took 17-22 GB and was killed by the kernel when other jobs grew).
"""
import json
from pathlib import Path

import pytest
import yaml

from acceptmoe.evals.tasks import get_task
from acceptmoe.experiments.table1.commands import main

from common import peak_rss, schedulers

ROOT = Path(__file__).resolve().parents[3]
MODELS = ("tiny", "tiny-again")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from sglang.srt.entrypoints.engine import Engine  # `sglang.Engine` is a lazy import of it

    tmp = tmp_path_factory.mktemp("table1")
    preset = yaml.safe_load((ROOT / "configs/presets/tiny.yaml").read_text())
    preset.update(tasks=["tiny-gsm", "tiny-humaneval"], calibration={"prompts": 2}, generation={"max_new_tokens": 48},
                  models=[{**preset["models"][0], "name": name} for name in MODELS])
    preset["table1"] = {"limit": 2}
    (tmp / "small.yaml").write_text(yaml.safe_dump(preset))
    starts, real = [], Engine.__init__

    def start(self, *args, **kwargs):
        before = schedulers()
        real(self, *args, **kwargs)
        starts.append((before, schedulers()))
    with pytest.MonkeyPatch.context() as mp, peak_rss() as peak:
        mp.setattr(Engine, "__init__", start)
        assert main(["--preset", str(tmp / "small.yaml"), "--engine", "sglang", "--methods", "standard-sd",
                     "acceptmoe", "--results", str(tmp / "r")]) == 0
    (folder,) = (tmp / "r/table1").glob("*/*")
    return folder, preset, starts, peak["bytes"]


def test_table1_runs_through_sglang_and_grades_like_a_fresh_grading(run):
    folder, preset, _, _ = run
    engines = [json.loads(line) for line in (folder / "engines.jsonl").read_text().splitlines()]
    assert engines and {e["engine"] for e in engines} == {"sglang"}
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    assert {(r["model"], r["task"], r["method"]) for r in rows} == {(m, t, x) for m in MODELS for t in preset["tasks"]
                                                                    for x in ("standard-sd", "acceptmoe")}
    for r in rows:
        task = get_task(r["task"])
        fresh = task.score_many([task.load("test")[r["index"]]], [r["response"]])[0]
        assert (r["correct"], r["extracted"]) == (fresh.correct, fresh.extracted), r["score_details"]
        assert "error" not in r["score_details"] and r["score_details"].get("base_status") != "not run", r
    assert (folder / "table1.md").is_file()


def test_one_server_per_model_one_at_a_time(run):
    _, _, starts, _ = run
    assert starts == [(0, 1)] * len(MODELS)        # no scheduler alive at each start, one after it


def test_pools_are_sized_from_the_run_and_memory_stays_bounded(run):
    folder, preset, _, peak = run
    world = json.loads((folder / "config.json").read_text())["config"]["world"]
    serving, generation = world["serving"], world["generation"]
    assert serving["prompt_tokens"] == 2048 and serving["overlap"] is False and generation["max_new_tokens"] == 48
    longest = max(generation["max_new_tokens"], generation["timed_tokens"])
    per_request = serving["prompt_tokens"] + longest + 5 * 10 + 64          # prompt, generation, one draft step
    for engine in (json.loads(line) for line in (folder / "engines.jsonl").read_text().splitlines()):
        total = generation["batch"] * per_request                            # requests in flight
        assert engine["pools"]["max_total_tokens"] == total and engine["server_args"]["max_total_tokens"] == str(total)
        assert engine["server_args"]["disable_overlap_schedule"] == "True"
    assert 0 < peak <= 4 << 30, f"SGLang's processes peaked at {peak / 2**30:.2f} GiB"
    print(f"SGLang's processes peaked at {peak / 2**30:.2f} GiB resident")
