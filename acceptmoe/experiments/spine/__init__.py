"""The spine every experiment stands on: configs, run folders and rows, engines and prompts, and the steps
of the world's rules that several experiments take (calibration, B0, graded generations, budgets).

Its modules, one line each: docs/architecture.md, "Rooms and the one-way rule".
"""
