"""The one merge of engines into a config: flags over `doctor.toml`, and a cycle's engines into its remediator's."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from doctor.config import ENGINE_ARGS, DoctorConfig, EngineConfig
from doctor.engines import EngineRef


def merge_flags(config: DoctorConfig, engines_from_flags: Sequence[EngineRef]) -> DoctorConfig:
    """Flags (or the engines a cycle reads: doctor.launched) override and extend the config's engines, by name.

    The one merge: `doctor diagnose` merges its flags into the config here, and the cycle merges its engines into
    the remediator's config here (so an engine named only by a flag, or a replica the launcher added, is an
    engine the guardrails and actuators know). An `--engine NAME=URL` naming a configured engine replaces its
    URL, and its role, log, dcgm, gpus and vLLM args where given; everything else (SLOs, thresholds, launcher,
    selector) stays from the config. A new name is added as a new engine. Configured engines not named stay.
    """
    engines = list(config.engines)
    for ref in engines_from_flags:
        idx = next((i for i, e in enumerate(engines) if e.name == ref.name), None)
        if idx is None:
            engines.append(EngineConfig(
                name=ref.name, url=ref.url, role=ref.role, log=ref.log, log_command=ref.log_command, gpus=ref.gpus,
                dcgm=ref.dcgm, selector=ref.selector, launcher=ref.launcher, max_num_seqs=ref.int_arg("max_num_seqs"),
                max_num_batched_tokens=ref.int_arg("max_num_batched_tokens"),
                max_model_len=ref.int_arg("max_model_len"), tensor_parallel_size=ref.int_arg("tensor_parallel_size")))
            continue
        old = engines[idx]
        args: dict[str, Any] = {k: ref.int_arg(k) for k in ENGINE_ARGS if ref.int_arg(k) is not None}
        engines[idx] = dataclasses.replace(
            old, url=ref.url, role=ref.role or old.role, log=ref.log or old.log,
            log_command=ref.log_command or old.log_command, gpus=ref.gpus or old.gpus, dcgm=ref.dcgm or old.dcgm,
            selector=ref.selector or old.selector, launcher=ref.launcher or old.launcher, **args)
    return dataclasses.replace(config, engines=tuple(engines))
