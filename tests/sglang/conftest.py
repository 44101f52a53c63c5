"""The tests under live/ import SGLang: they run in the separate SGLang environment (test_live.py starts them),
never in the project's own interpreter."""
collect_ignore = ["live"]
