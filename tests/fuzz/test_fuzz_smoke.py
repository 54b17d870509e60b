"""The fuzz smoke in `make test`: each target's contract over its seed corpus and a few thousand mutants of it
(deterministic, so a failure replays; the bounded coverage-guided runs are `make fuzz`)."""

from __future__ import annotations

import pytest

from tests.fuzz.mutate import mutants
from tests.fuzz.targets import TARGETS, load, seeds

# Inputs per target: the slower targets (two scrapes and a derivation; a file scan; a TOML load) get fewer.
MUTANTS = {"metrics": 800, "logs": 800, "config": 800, "dcgm": 300, "router_metrics": 600}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_target_keeps_its_contract_on_seeds_and_mutants(target: str) -> None:
    fuzz_one = load(target)
    corpus = seeds(target)
    assert corpus, f"no seeds in tests/fuzz/corpus/{target}"
    for data in corpus:
        fuzz_one(data)
    for i, data in enumerate(mutants(corpus, MUTANTS.get(target, 3000), seed=len(target))):
        try:
            fuzz_one(data)
        except Exception as exc:
            raise AssertionError(f"{target}: mutant {i} broke the contract: {data[:200]!r}") from exc
