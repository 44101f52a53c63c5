"""The claims table: every quantitative claim of the paper beside what the saved runs measured.

A reader of results, not an experiment: it runs nothing and owns no config section. It reads other
experiments' run folders through their record builders only (Table 1's table, the throughput records and
report's `load_records`, the study's tables, the replay's report), the one exception to "an experiment
package imports no other" (`tests/architecture/test_import_graph.py` names the modules it may read).
The claims themselves (id, text, the paper's value and direction) live in `spine.paper`, where the
throughput report's paper column reads them too.

| module     | what it holds                                                                                    |
|------------|--------------------------------------------------------------------------------------------------|
| `measured` | `Measured`: what a run says about one claim, with its interval and per-pair or per-step evidence |
| `read`     | per experiment, its run's rows: Table 1, the worlds study, the calibration study; `READERS`      |
| `timed`    | the same for the throughput runs and the replay (which routes each replay row used)              |
| `verdict`  | the direction rules: yes / no / not resolved from an interval, margins, every pair               |
| `table`    | which runs (default: the newest reference runs), one row per claim, outputs                      |
| `commands` | `claims`                                                                                         |
"""
