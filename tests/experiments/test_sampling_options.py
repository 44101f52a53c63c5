"""Sampling options reach every run the same way: the world's `sampling:` (defaults: `GenerationOptions`',
greedy), `--temperature/--top-p/--top-k/--seed` on every experiment command, one derived seed per request,
and the fields recorded in the config and in a sampled generation's trace (a greedy trace unchanged)."""
from __future__ import annotations

import pytest

from acceptmoe.cli import main
from acceptmoe.engine import GenerationOptions, load_engine
from acceptmoe.engine.backend import request_seed
from acceptmoe.experiments.spine.config import ConfigKeyError, load_experiment
from acceptmoe.experiments.table1.config import Table1Config
from acceptmoe.methods import Variant


def test_the_defaults_are_the_options_records_greedy():
    world = load_experiment(Table1Config, "tiny", {}).world
    assert world.sampling.greedy and world.sampling.options().sampling() is None
    base = GenerationOptions()
    assert (world.sampling.temperature, world.sampling.top_k, world.sampling.top_p) == \
        (base.temperature, base.top_k, base.top_p)
    greedy = world.sampling.options("tiny", "tiny-gsm", "test", 3)
    assert greedy.greedy and greedy.sampling() is None and greedy.seed == world.sampling.seed   # not derived


def test_each_prompt_draws_its_own_reproducible_stream():
    world = load_experiment(Table1Config, "tiny", {"world.sampling.temperature": 1.0,
                                                   "world.sampling.seed": 7}).world
    a = world.sampling.options("tiny", "tiny-gsm", "test", 0)
    assert a.seed == request_seed(7, "tiny", "tiny-gsm", "test", 0) == \
        world.sampling.options("tiny", "tiny-gsm", "test", 0).seed
    others = {world.sampling.options("tiny", t, "test", i).seed for t in ("tiny-gsm", "tiny-math") for i in range(50)}
    assert len(others) == 100 and a.sampling() == {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": a.seed}
    assert request_seed(8, "tiny", "tiny-gsm", "test", 0) != a.seed


def test_bad_sampling_values_name_the_key(capsys):
    with pytest.raises(ConfigKeyError, match=r"sampling.*temperature must be a finite number >= 0"):
        load_experiment(Table1Config, "tiny", {"world.sampling.temperature": -1.0})
    assert main(["table1", "--top-p", "0", "--limit", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "top_p must be in (0, 1]" in err[0]


def test_per_prompt_options_and_the_trace_record():
    engine = load_engine("models/tiny")
    plan = Variant("standard-sd").bind(engine.fit)
    prompts = [[1, 17, 42], [5, 9, 300]]
    opts = [GenerationOptions(temperature=1.0, seed=s) for s in (3, 4)]
    many = engine.generate_many(prompts, plan, 6, opts)
    alone = [engine.generate(p, plan, 6, o) for p, o in zip(prompts, opts, strict=True)]
    assert [g.tokens for g in many] == [g.tokens for g in alone]
    assert many[1].trace.meta["sampling"] == {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 4}
    assert "sampling" not in engine.generate(prompts[0], plan, 4).trace.meta          # greedy: as before
    batched = engine.generate_batch(prompts, plan, 6, opts)
    assert [g.tokens for g in batched] == [g.tokens for g in alone]


def test_tables_say_how_the_run_decoded():
    world = load_experiment(Table1Config, "tiny", {}).world
    assert world.sampling.describe() == "greedy"
    hot = load_experiment(Table1Config, "tiny", {"world.sampling.temperature": 0.6, "world.sampling.top_p": 0.9}).world
    assert hot.sampling.describe() == "sampled at temperature 0.6 (top-k off, top-p 0.9, seed 0)"


def _source_run(folder, sampling=None):
    """A run folder's config.json as Table 1 writes it (`sampling`: the world's settings; None: a run made before
    sampling existed)."""
    import json
    folder.mkdir()
    world = {"preset": "tiny"} if sampling is None else {"preset": "tiny", "sampling": sampling}
    (folder / "config.json").write_text(json.dumps({"experiment": "table1", "config": {"world": world}}))
    return folder


def test_budgets_from_a_run_that_sampled_otherwise_is_refused(tmp_path, capsys):
    from acceptmoe.errors import UserError
    from acceptmoe.experiments.spine.budgets import check_source_sampling
    greedy = load_experiment(Table1Config, "tiny", {}).world
    hot = load_experiment(Table1Config, "tiny", {"world.sampling.temperature": 1.0, "world.sampling.top_p": 0.9}).world
    sampled = _source_run(tmp_path / "sampled", {"temperature": 1.0, "top_k": 0, "top_p": 0.9, "seed": 0})
    old = _source_run(tmp_path / "old")
    check_source_sampling(hot, sampled)                                  # the same settings: reused
    check_source_sampling(greedy, old)                                   # no record: the greedy defaults
    with pytest.raises(UserError, match=r"temperature 1\.0 there, 0\.0 here, top_p 0\.9 there, 1\.0 here"):
        check_source_sampling(greedy, sampled)
    with pytest.raises(UserError, match=r"temperature 0\.0 there, 1\.0 here"):
        check_source_sampling(hot, old)
    reseeded = load_experiment(Table1Config, "tiny", {"world.sampling.temperature": 1.0,
                                                      "world.sampling.top_p": 0.9, "world.sampling.seed": 5}).world
    with pytest.raises(UserError, match=r"seed 0 there, 5 here"):
        check_source_sampling(reseeded, sampled)
    # the command line: one error line, exit 2, before a run folder is made
    assert main(["divergence", "--limit", "1", "--budgets-from", str(sampled), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --budgets-from") and "temperature 1.0 there, 0.0 here" in err[0]
    assert "drop --budgets-from" in err[0] and not (tmp_path / "r").exists()
