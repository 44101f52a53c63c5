"""The calibration study: beta sensitivity, p_hat recounted under AcceptMoE's own routing, B0 from training
traces (the referee's calibration requests).

| module     | what it holds                                                         |
|------------|-----------------------------------------------------------------------|
| `config`   | `CalibrationStudyConfig`, the `calibration-study:` section; its variants |
| `runner`   | on-policy traces, B0 from them, the graded variants per pair          |
| `tables`   | the study's tables from saved files only                              |
| `work`     | its work counted for `./reproduce.sh plan`                            |
| `commands` | `calibration-study`                                                   |
"""
from acceptmoe.experiments.spine.catalog import Experiment

# found by `spine.catalog` (docs/architecture.md, "Experiments are found")
EXPERIMENT = Experiment(__name__, order=30, config="config:CalibrationStudyConfig",
                        tables={"calibration-study": "tables:write_study"},
                        plan={"calibration-study": "work:work"}, claims=("calibration-study",),
                        records=("tables", "config"))
