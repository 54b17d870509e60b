"""One atheris (libFuzzer) run of one target: `python -m tests.fuzz.worker TARGET SECONDS WORK SEEDS ARTIFACTS`.

The product modules the target imports are instrumented for coverage; new inputs go to WORK (the seeds in
SEEDS are only read); a crash or a hang (-timeout per input) is written under ARTIFACTS."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import atheris

    target, seconds, work, seeds, artifacts = argv
    with atheris.instrument_imports(include=["collectors", "doctor", "router", "tests.fuzz"]):
        from tests.fuzz.targets import load

        fuzz_one = load(target)
    atheris.Setup([sys.argv[0], work, seeds, f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=2048",
                   f"-artifact_prefix={artifacts}/", "-print_final_stats=1", "-max_len=65536"], fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv[1:])
