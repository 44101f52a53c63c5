"""Experiments: what to run on which models, where results go, and the tables and figures built from them.

One package per experiment over a shared spine; imports run spine <- experiment <- the cross-cutting
commands, never from one experiment into another (a test holds it).

The packages and what each may import: docs/architecture.md, "Rooms and the one-way rule".
"""
