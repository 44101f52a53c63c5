"""The calibration study: beta sensitivity, p_hat recounted under AcceptMoE's own routing, B0 from training
traces (the referee's calibration requests).

| module     | what it holds                                                         |
|------------|-----------------------------------------------------------------------|
| `config`   | `CalibrationStudyConfig`, the `calibration-study:` section; its variants |
| `runner`   | on-policy traces, B0 from them, the graded variants per pair          |
| `tables`   | the study's tables from saved files only                              |
| `commands` | `calibration-study`                                                   |
"""
from collections.abc import Callable
from pathlib import Path


def _study(run: Path) -> str:
    from .tables import write_study
    return write_study(run)


BUILDERS: dict[str, Callable[[Path], str]] = {"calibration-study": _study}   # run folder -> its tables
