"""A new experiment is its own folder plus its test, and no list is edited: a throwaway experiment package,
written to a temporary folder put on the experiments' path, is found by the catalog, listed and run by the
CLI, rebuilt by `tables`, offered by `plan`, and held to the one-way import rule, like the committed ones.

Files a new experiment touched before the records: its package (`__init__.py`, config, runner, tables,
commands), its section's YAML and its test, plus three hand-kept lists (`commands.COMMAND_DIRS`, the package
tuple of `experiments/tables.py`, `EXPERIMENT_PACKAGES` of the import-graph test, which silently exempted a
package it missed) and two more where plan or the claims knew it (`plan.EXPERIMENTS` and its per-experiment
work function, `claims.table.DEFAULT_EXPERIMENTS`): 10 to 12 files. Now: the same package (with a `work` module
where plan should size it), its YAML and its test, and nothing else; a claims reader is the one addition that
stays outside the folder, in `claims/` (code, not a list)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_import_graph import experiment_arrows, graph

import acceptmoe.experiments
from acceptmoe import cli
from acceptmoe.commands import COMMANDS
from acceptmoe.experiments import tables
from acceptmoe.experiments.spine import catalog
from acceptmoe.tools import plan

NAME, COMMAND = "toy_study", "toy-study"
TOY = {
    "__init__.py": '''"""A throwaway experiment (tests/architecture/test_new_experiment.py)."""
from acceptmoe.experiments.spine.catalog import Experiment

EXPERIMENT = Experiment(__name__, order=99, tables={"toy-study": "report:rebuild"}, plan={"toy-study": "work:work"})
''',
    "commands.py": '''from acceptmoe.commands import command, parser


@command("toy-study", "a throwaway experiment: prints one line")
def main(argv=None) -> int:
    parser("toy-study").parse_args(argv)
    print("toy-study ran")
    return 0
''',
    "report.py": '''from pathlib import Path

from ..spine.runs import recorded_experiment


def rebuild(run) -> str:
    (Path(run) / "toy.md").write_text(f"# {recorded_experiment(run)}\\n")
    return "toy table"
''',
    "work.py": '''def work(experiment, preset, overrides):
    raise NotImplementedError
''',
}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The throwaway package on the experiments' path (every trace of it gone afterwards)."""
    folder = tmp_path / "found" / NAME
    folder.mkdir(parents=True)
    for name, text in TOY.items():
        (folder / name).write_text(text)
    monkeypatch.setattr(acceptmoe.experiments, "__path__", [*acceptmoe.experiments.__path__, str(folder.parent)])
    yield folder
    COMMANDS.remove(COMMAND)
    for module in [m for m in sys.modules if m.startswith(f"acceptmoe.experiments.{NAME}")]:
        del sys.modules[module]


def test_the_catalog_finds_a_new_folder(toy):
    assert NAME in catalog.experiments() and catalog.ordered()[-1].name == NAME
    assert NAME in catalog.package_names() and NAME not in catalog.package_names((str(Path(acceptmoe.experiments.__file__).parent),))
    with pytest.raises(KeyError, match="did you mean 'toy_study'"):
        catalog.experiments()["toy_studdy"]


def test_the_cli_lists_and_runs_its_command(toy, capsys):
    assert f"  {COMMAND}" in cli.usage() and "a throwaway experiment: prints one line" in cli.usage()
    assert cli.main([COMMAND]) == 0 and "toy-study ran" in capsys.readouterr().out


def test_tables_rebuilds_its_runs(toy, tmp_path):
    run = tmp_path / "results" / COMMAND / "tiny" / "toy-1"
    run.mkdir(parents=True)
    (run / "config.json").write_text('{"experiment": "toy-study"}')
    (run / "samples.jsonl").write_text("")
    assert tables.run_folders(tmp_path / "results") == [(COMMAND, run)]
    assert tables.main(["--run", str(run)]) == 0 and (run / "toy.md").read_text() == "# toy-study\n"


def test_plan_offers_it(toy, capsys):
    with pytest.raises(SystemExit):
        plan.main(["--help"])
    assert COMMAND in capsys.readouterr().out


def test_the_import_rule_covers_it(toy):
    """Found by walking the same path, so never exempt: on the spine alone it passes; a module reaching into
    another experiment's runner fails, named; a package without a record fails in the catalog."""
    assert not [a for a in experiment_arrows(graph()) if NAME in a]
    (toy / "bad.py").write_text("from acceptmoe.experiments.table1.runner import run_table1  # noqa\n")
    assert experiment_arrows(graph()) == [f"acceptmoe.experiments.{NAME}.bad -> acceptmoe.experiments.table1.runner"]
    stray = toy.parent / "stray"
    stray.mkdir()
    (stray / "__init__.py").write_text('"""A package without a record."""\n')
    with pytest.raises(LookupError, match="declares no EXPERIMENT"):
        catalog.ordered()
    sys.modules.pop("acceptmoe.experiments.stray", None)
