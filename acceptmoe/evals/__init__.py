"""The evaluation layer: checksummed data (data), tasks and their registry (tasks), answer extraction
(extract), math equivalence (mathcheck), the code sandbox (sandbox) and bootstrap statistics (stats)."""
