"""A scenario-by-product matrix whose default run takes each scenario once; the other pairs run in the slow
suite (.ci/run runs it on every change)."""

from typing import List, Sequence

import pytest


def each_scenario_once(scenarios: Sequence[str], products: Sequence[str], in_turn: Sequence[str],
                       everywhere: Sequence[str] = ("healthy",)) -> List:
    """pytest params (scenario, product), id `scenario-product`, for every pair. The default run takes each
    scenario on one product of `in_turn`, by the scenario's place in the list, and each of `everywhere` on every
    product of `in_turn`; every other pair is marked slow."""
    cases = []
    for index, scenario in enumerate(scenarios):
        turn = in_turn[index % len(in_turn)]
        for product in products:
            default = product == turn or (scenario in everywhere and product in in_turn)
            cases.append(pytest.param(scenario, product, id="{}-{}".format(scenario, product),
                                      marks=() if default else pytest.mark.slow))
    return cases
