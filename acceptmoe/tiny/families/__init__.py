"""Per-family example makers for the tiny tasks. Each module exposes `make(rng) -> dict` that draws one
example (question, reference and the family's grading fields, no id) from a `random.Random`."""
