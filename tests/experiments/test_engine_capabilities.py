"""What an engine can do is declared on its class (`Capabilities`), and a run that needs what its engine lacks is
refused before it starts, naming the engines that have it: route recording, an offloaded store, batched verify.
A capability-less engine is registered for the test under its own name; the check reads only its class."""
from __future__ import annotations

import pytest

from acceptmoe.engine import Capabilities, Engine, GenerationOptions
from acceptmoe.errors import UserError
from acceptmoe.experiments.spine.engines import ENGINES, check_engine, engines_that


class Plain(Engine):
    name = "plain"
    capabilities = Capabilities(records_routes=False, offloads=False, switches_plans_freely=True,
                                verifies_batched=False)


@pytest.fixture
def plain():
    ENGINES.add("plain", Plain)
    yield "plain"
    ENGINES.remove("plain")


def test_the_native_engine_declares_everything_the_runners_ask():
    caps = ENGINES["native"].capabilities
    assert caps == Capabilities(records_routes=True, offloads=True, switches_plans_freely=True, verifies_batched=True,
                                samples=("cpu", "cuda"), admits=True)
    assert caps.samples_on("cpu") and caps.samples_on("cuda:1")


def test_a_run_needing_what_the_engine_lacks_is_refused_by_capability(plain):
    check_engine(plain)                                          # a resident run without routes: fine
    with pytest.raises(UserError, match=r"plain engine does not record routes.*\(native"):
        check_engine(plain, routes=True)
    with pytest.raises(UserError, match=r"plain engine has no offloaded .*\(native"):
        check_engine(plain, "offloaded")
    assert "native" in engines_that("records_routes") and plain not in engines_that("offloads")


def test_an_unknown_engine_gets_the_closest_name():
    with pytest.raises(UserError, match="native"):
        check_engine("nativ")


def test_options_are_one_frozen_record():
    options = GenerationOptions(ignore_eos=True)
    assert (options.trace_layers, options.record_routes) == (True, False)
    with pytest.raises(AttributeError):
        options.ignore_eos = False                               # type: ignore[misc]
