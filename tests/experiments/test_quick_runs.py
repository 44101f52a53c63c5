"""Quick runs are quick: calibration runs only where a method needs p_hat, `--calibration-limit` (and
`calibrate --limit`) bound it, and `calibrate` refuses options it has no use for. On the runner tests' tiny
random target and draft (runner_world)."""
from __future__ import annotations

import json

import pytest

from acceptmoe.experiments.table1 import commands as table1

import runner_world as world


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    root = tmp_path_factory.mktemp("quick")
    return world.write_preset(root, world.make_models(root / "models"), limit=1)


def _run_folder(results):
    (run,) = [p.parent for p in results.rglob("config.json")]
    return run


def test_the_references_alone_calibrate_nothing(preset, tmp_path):
    assert table1.main(["--preset", str(preset), "--methods", "vanilla-ar", "standard-sd",
                        "--results", str(tmp_path)]) == 0
    run = _run_folder(tmp_path)
    assert not (run / "calibration").exists()
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} == {"vanilla-ar", "standard-sd"} and len(rows) == 2 * len(world.TASKS)


def test_calibrate_honours_its_limit_and_refuses_methods(preset, tmp_path, capsys):
    assert table1.calibrate(["--preset", str(preset), "--limit", "1", "--results", str(tmp_path)]) == 0
    tables = sorted((_run_folder(tmp_path) / "calibration" / "rand").glob("*-train.json"))
    assert [t.name for t in tables] == [f"{task}-train.json" for task in sorted(world.TASKS)]
    assert all(json.loads(t.read_text())["provenance"]["prompts"] == 1 for t in tables)
    assert all(str(t) in capsys.readouterr().out for t in tables[:1])
    with pytest.raises(SystemExit) as stop:
        table1.calibrate(["--preset", str(preset), "--methods", "acceptmoe", "--results", str(tmp_path)])
    assert stop.value.code == 2


def _without_draft(preset, tmp_path, how):
    import yaml
    data = yaml.safe_load(preset.read_text())
    if how == "null":
        data["models"][0]["draft"] = None
    else:
        del data["models"][0]["draft"]
    path = tmp_path / f"no-draft-{how}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("how", ["missing", "null"])
def test_a_model_without_a_draft_runs_what_needs_none_and_refuses_the_rest_before_work(preset, tmp_path, how):
    from acceptmoe.errors import UserError
    no_draft = _without_draft(preset, tmp_path, how)
    with pytest.raises(UserError, match=r"model 'rand' has no draft, and standard-sd speculate.*train-draft"):
        table1.main(["--preset", str(no_draft), "--methods", "vanilla-ar", "standard-sd",
                     "--results", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()                  # refused before a run folder was made
    assert table1.main(["--preset", str(no_draft), "--methods", "vanilla-ar", "--results", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in (_run_folder(tmp_path) / "samples.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} == {"vanilla-ar"} and len(rows) == len(world.TASKS)


def test_a_file_task_runs_in_table1_with_every_method(preset, tmp_path):
    import yaml

    from acceptmoe.evals.tasks import TASKS, get_task
    from acceptmoe.evals.tasks.from_file import register_file

    from fixtures import write_task_file

    task_file = write_task_file(tmp_path / "task", name="my-arith-t1")
    data = yaml.safe_load(preset.read_text())
    data.update(task_files=[str(task_file)], tasks=["my-arith-t1"])
    mine = tmp_path / "with-file-task.yaml"
    mine.write_text(yaml.safe_dump(data))
    try:
        assert table1.main(["--preset", str(mine), "--results", str(tmp_path / "r")]) == 0
        (run,) = [p.parent for p in (tmp_path / "r").rglob("config.json")]
        rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        assert {r["task"] for r in rows} == {"my-arith-t1"} and len({r["method"] for r in rows}) >= 6
        assert (run / "calibration" / "rand" / "my-arith-t1-train.json").is_file()
        assert "my-arith-t1" in (run / "table1.md").read_text()
        assert register_file(task_file) == "my-arith-t1" and get_task("my-arith-t1").version == "file-1"
    finally:
        TASKS.remove("my-arith-t1")


def test_relative_paths_in_a_users_preset_are_read_beside_it(preset, tmp_path):
    """A preset outside the repository naming `models/target` next to itself: its own folder, not the repo's."""
    import shutil

    import yaml

    from acceptmoe.experiments.spine.config import load_world
    data = yaml.safe_load(preset.read_text())
    mine = tmp_path / "elsewhere"
    shutil.copytree(data["models"][0]["target"], mine / "models" / "target")
    data["models"][0]["target"] = "models/target"
    data["models"][0]["draft"] = "models/tiny/draft"                     # not beside it: the repository's
    (mine / "mine.yaml").write_text(yaml.safe_dump(data))
    (model,) = load_world(mine / "mine.yaml").models
    assert model.target == str(mine / "models" / "target") and model.draft == "models/tiny/draft"
    (shipped,) = load_world("tiny").models
    assert (shipped.target, shipped.draft) == ("models/tiny/target", "models/tiny/draft")
