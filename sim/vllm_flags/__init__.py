"""Every `vllm serve` flag of each profile's release, from the generated tables beside this file.

The sim's parser accepts exactly the flags of the imitated release: the ones the sim models keep their
own definitions; the rest are added from the table (parsed with the release's nargs, type and choices,
then ignored and named in one warning). A flag the release lacks is rejected as its argparse does.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

# Profile name -> generated table module (the release the profile imitates).
_MODULES = {
    "0.6": "r0_6", "0.8": "r0_8", "0.10": "r0_10", "0.10-v0": "r0_10", "0.11": "r0_11", "0.12": "r0_12",
    "0.20": "r0_20", "0.26": "r0_26", "0.32": "r0_32", "0.33": "r0_33",
}


@dataclass(frozen=True)
class Flag:
    """One `vllm serve` argument of a release."""

    dest: str
    kind: str  # true | bool | strbool | value | ? | + | * | append
    options: tuple[str, ...]  # every spelling
    false_options: frozenset[str]  # spellings that set a bool False
    type: str  # "int", "float" or ""
    choices: tuple[str, ...]
    default: Any


@cache
def release_flags(profile: str) -> tuple[Flag, ...]:
    """The flags of the release a profile imitates."""
    mod = importlib.import_module(f"sim.vllm_flags.{_MODULES[profile]}")
    out = []
    for row in mod.TABLE.splitlines():
        if not row:
            continue
        dest, kind, opts, typ, choices, default = row.split("\t")
        spellings = opts.split()
        out.append(Flag(dest, kind, tuple(o.lstrip("!") for o in spellings),
                        frozenset(o[1:] for o in spellings if o.startswith("!")), typ,
                        tuple(choices.split(",")) if choices else (), json.loads(default)))
    return tuple(out)


def release_name(profile: str) -> str:
    return str(importlib.import_module(f"sim.vllm_flags.{_MODULES[profile]}").RELEASE)


class BoolAction(argparse.Action):
    """BooleanOptionalAction / EnableDisableAction: the spelling decides the value."""

    def __init__(self, option_strings: Sequence[str], dest: str, false_options: frozenset[str] = frozenset(),
                 **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)
        self.false_options = false_options

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string not in self.false_options)


def str_bool(value: str) -> bool:
    """0.6's StoreBoolean: 'true' or 'false'."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise argparse.ArgumentTypeError(f"Invalid boolean value: {value}. Expected 'true' or 'false'.")


def add_flag(group: argparse._ActionsContainer, flag: Flag, options: Sequence[str] | None = None) -> None:
    """Add one release flag as the release parses it (values only checked, not acted on)."""
    opts = list(options or flag.options)
    kw: dict[str, Any] = {"dest": flag.dest, "default": flag.default, "help": argparse.SUPPRESS}
    if flag.kind == "true":
        group.add_argument(*opts, action="store_true", **kw)
        return
    if flag.kind == "bool":
        group.add_argument(*opts, action=BoolAction, false_options=flag.false_options, **kw)
        return
    conv: Callable[[str], Any] | None = {"int": int, "float": float}.get(flag.type)
    if flag.kind == "strbool":
        conv = str_bool
        kw.update(nargs="?", const=True)
    if conv is not None:
        kw["type"] = conv
    if flag.choices and conv is None:
        kw["choices"] = list(flag.choices)
    if flag.kind in ("?", "+", "*"):
        kw["nargs"] = flag.kind
    elif flag.kind == "append":
        kw["action"] = "append"
    group.add_argument(*opts, **kw)


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser: `--max_num_seqs` means `--max-num-seqs`."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            key, sep, value = arg.partition("=")
            arg = key.replace("_", "-") + sep + value
        out.append(arg)
    return out
