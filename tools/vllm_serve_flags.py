"""Regenerate sim/vllm_flags/r*.py: dump `vllm serve`'s argparse actions of each release, then render tables.

Dump (in a venv with torch and vLLM's dependencies, the release's pure-Python tree from its wheel on the
path): `python tools/vllm_serve_flags.py dump SRC_DIR OUT.json`. Render:
`python tools/vllm_serve_flags.py render DUMP_DIR`. Not part of the package or the tests.
"""
# ruff: noqa
import json
import sys

def dump(src: str, out: str) -> None:
    import argparse, json, sys, os, importlib
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    
    sys.path.insert(0, src)
    import types, importlib.abc, importlib.machinery
    class _Stub(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {})
    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in STUBS:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None
        def create_module(self, spec):
            m = _Stub(spec.name); m.__path__ = []; m.__file__ = "/nonexistent/" + spec.name + ".py"; return m
        def exec_module(self, module):
            pass
    STUBS = set()
    for _m in ("gguf", "diskcache"):
        try:
            importlib.import_module(_m)
        except ImportError:
            STUBS.add(_m)
    sys.meta_path.insert(0, _Finder())
    import vllm
    try:
        import vllm.platforms as _pl
        if hasattr(_pl, "builtin_platform_plugins"):
            for _k in list(_pl.builtin_platform_plugins):
                _pl.builtin_platform_plugins[_k] = (lambda: "vllm.platforms.cpu.CpuPlatform") if _k == "cpu" else (lambda: None)
        from vllm.platforms.cpu import CpuPlatform
        _pl._current_platform = CpuPlatform()
    except Exception as e:
        print("platform patch failed", e)
    assert vllm.__file__.startswith(src), vllm.__file__
    cli_args = None
    for mod in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            cli_args = importlib.import_module(mod); break
        except ImportError as e:
            print(mod, "->", e)
            continue
    try:
        from vllm.utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server.")
    # `vllm serve` (0.8+) adds model_tag positional; 0.6 api_server has only --model
    try:
        from vllm.entrypoints.cli.serve import ServeSubcommand
        has_serve = True
    except ImportError:
        has_serve = False
    if has_serve:
        subs = parser.add_subparsers(dest="subparser")
        p = ServeSubcommand().subparser_init(subs)
    else:
        p = cli_args.make_arg_parser(parser)
    rows = []
    for a in p._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        kind = type(a).__name__
        d = a.default
        try:
            json.dumps(d); default = d
        except TypeError:
            default = repr(d)
        # Every registered spelling (0.33 keeps hidden --no-enable-x ones out of option_strings).
        opts = [o for o, act in p._option_string_actions.items() if act is a]
        neg = sorted(getattr(a, "negative_option_strings", None) or [o for o in opts if o.startswith("--no-")])
        rows.append(dict(opts=opts, neg=neg, dest=a.dest, kind=kind,
                         nargs=a.nargs if not isinstance(a.nargs, int) or True else None,
                         type=getattr(a.type, "__name__", repr(a.type)) if a.type else None,
                         choices=[str(c) for c in a.choices] if a.choices else None, default=default))
    json.dump(dict(version=vllm.__version__, has_serve=has_serve, actions=rows), open(out, "w"), indent=0)
    print(vllm.__version__, len(rows))

def render(dump_dir: str) -> None:
    SRC = {
        "0.6.6.post1": "vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py",
        "0.8.5.post1": "vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py + vllm/entrypoints/cli/serve.py",
        "0.10.2": "vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py",
        "0.11.0": "vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py",
        "0.12.0": "vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py + vllm/entrypoints/cli/serve.py",
        "0.20.2": "vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py + vllm/entrypoints/cli/serve.py",
        "0.26.0": "vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py + vllm/entrypoints/cli/serve.py",
        "0.32.0": "vllm/engine/arg_utils.py + vllm/entrypoints/launchers/cli_args.py + vllm/entrypoints/cli/serve.py",
        "0.33.0": "vllm/engine/arg_utils.py + vllm/entrypoints/common/cli_args.py",
    }
    NEG = ("--no-", "--disable-", "--enable-")
    for rel, files in SRC.items():
        d = json.load(open(f"{dump_dir}/{rel}.json"))
        rows = []
        for a in d["actions"]:
            if not a["opts"]:
                continue  # the model_tag positional: the sim's parser has its own
            k = a["kind"]
            opts = a["opts"]
            if k == "_StoreTrueAction":
                kind = "true"
            elif k in ("BooleanOptionalAction", "EnableDisableAction"):
                kind = "bool"
                opts = [("!" + o) if o in a["neg"] else o for o in opts]
            elif k == "StoreBoolean":
                kind = "strbool"
            elif k == "_AppendAction":
                kind = "append"
            elif a["nargs"] in ("?", "+", "*"):
                kind = a["nargs"]
            else:
                kind = "value"
            t = a["type"] if a["type"] in ("int", "float") else ""
            ch = ",".join(a["choices"]) if a["choices"] and len(a["choices"]) < 60 else ""
            default = json.dumps(a["default"]) if not isinstance(a["default"], str) or not a["default"].startswith("<") else "null"
            rows.append("\t".join([a["dest"], kind, " ".join(opts), t, ch, default]))
        mod = rel.split(".")
        name = f"r{mod[0]}_{mod[1]}"
        body = "\n".join(rows)
        out = f'''"""`vllm serve` arguments of vLLM {rel}: generated, do not edit by hand.
    
    From vLLM {rel}'s own parser (the wheel's {files}), dumped with
    argparse by tools/vllm_serve_flags.py. Columns (tab-separated): dest, kind (true | bool | strbool |
    value | ? | + | * | append), option strings ("!" marks one that sets a bool False), type (int, float or
    empty), choices (comma-separated or empty), default (JSON).
    """
    
    from __future__ import annotations
    
    RELEASE = "{rel}"
    TABLE = r"""
    {body}
    """
    '''
        out = out.replace("\\\\\n", "\\\n")
        out = "\n".join(line[4:] if line.startswith("    ") else line for line in out.split("\n"))
        open(f"sim/vllm_flags/{name}.py", "w").write(out)
        print(name, len(rows))

if __name__ == "__main__":
    dump(*sys.argv[2:4]) if sys.argv[1] == "dump" else render(sys.argv[2])
