"""The claims table: every quantitative claim of the paper beside what the saved runs measured.

A reader of results, not an experiment: it runs nothing and owns no config section. It reads other
experiments' run folders through their record builders only (Table 1's table, the throughput records and
report's `load_records`, the study's tables, the replay's report, the batch study's records, the divergence
report), the one exception to "an experiment package imports no other": its record says it reads
(`reads=True`), and each experiment's record names the modules a reader may import (`records=`), which the
import-graph test holds it to.
The claims themselves (id, text, the paper's value and direction) live in `spine.paper`, where the
throughput report's paper column reads them too.

| module     | what it holds                                                                                    |
|------------|--------------------------------------------------------------------------------------------------|
| `measured` | `Measured`: what a run says about one claim, with its interval and per-pair or per-step evidence |
| `read`     | per experiment, its run's rows: Table 1, the worlds study, the calibration study; `READERS`      |
| `beyond`   | the findings beyond the paper: the batch study's and the divergence report's rows                |
| `timed`    | the same for the throughput runs and the replay (which routes each replay row used)              |
| `verdict`  | the direction rules: yes / no / not resolved from an interval, margins, every pair               |
| `table`    | which runs (default: the newest reference runs), one row per claim, outputs                      |
| `commands` | `claims`                                                                                         |
"""
from acceptmoe.experiments.spine.catalog import Experiment

# found by `spine.catalog`: a reader of results, owning no section; it may import other experiments' `records`
EXPERIMENT = Experiment(__name__, order=60, reads=True)
