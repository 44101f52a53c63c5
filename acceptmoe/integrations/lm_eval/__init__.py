"""lm-evaluation-harness, with this project as a model backend (where it ranks and why: docs/architecture.md,
"Rooms and the one-way rule").

    backend   `AcceptMoELM` (registered with lm-eval as "acceptmoe" when imported) and `./reproduce.sh lm-eval`
    tasks/    offline tasks: lm-eval's own task configs reading the repository's checksummed data (`evals.tasks`)

Importing this package imports nothing of lm-eval; `import acceptmoe.integrations.lm_eval.backend` registers the
backend.
"""
