"""`vllm serve` arguments of vLLM 0.11.0: generated, do not edit by hand.

From vLLM 0.11.0's own parser (the wheel's vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py), dumped with
argparse by tools/vllm_serve_flags.py. Columns (tab-separated): dest, kind (true | bool | strbool |
value | ? | + | * | append), option strings ("!" marks one that sets a bool False), type (int, float or
empty), choices (comma-separated or empty), default (JSON).
"""

from __future__ import annotations

RELEASE = "0.11.0"
TABLE = r"""
headless	true	--headless			false
api_server_count	value	--api-server-count -asc	int		1
config	value	--config			null
host	value	--host			null
port	value	--port	int		8000
uds	value	--uds			null
uvicorn_log_level	value	--uvicorn-log-level		critical,debug,error,info,trace,warning	"info"
disable_uvicorn_access_log	bool	--disable-uvicorn-access-log !--no-disable-uvicorn-access-log			false
allow_credentials	bool	--allow-credentials !--no-allow-credentials			false
allowed_origins	value	--allowed-origins			["*"]
allowed_methods	value	--allowed-methods			["*"]
allowed_headers	value	--allowed-headers			["*"]
api_key	+	--api-key			null
lora_modules	+	--lora-modules			null
chat_template	value	--chat-template			null
chat_template_content_format	value	--chat-template-content-format		auto,openai,string	"auto"
trust_request_chat_template	bool	--trust-request-chat-template !--no-trust-request-chat-template			false
response_role	value	--response-role			"assistant"
ssl_keyfile	value	--ssl-keyfile			null
ssl_certfile	value	--ssl-certfile			null
ssl_ca_certs	value	--ssl-ca-certs			null
enable_ssl_refresh	bool	--enable-ssl-refresh !--no-enable-ssl-refresh			false
ssl_cert_reqs	value	--ssl-cert-reqs	int		0
root_path	value	--root-path			null
middleware	append	--middleware			[]
return_tokens_as_token_ids	bool	--return-tokens-as-token-ids !--no-return-tokens-as-token-ids			false
disable_frontend_multiprocessing	bool	--disable-frontend-multiprocessing !--no-disable-frontend-multiprocessing			false
enable_request_id_headers	bool	--enable-request-id-headers !--no-enable-request-id-headers			false
enable_auto_tool_choice	bool	--enable-auto-tool-choice !--no-enable-auto-tool-choice			false
exclude_tools_when_tool_choice_none	bool	--exclude-tools-when-tool-choice-none !--no-exclude-tools-when-tool-choice-none			false
tool_call_parser	value	--tool-call-parser			null
tool_parser_plugin	value	--tool-parser-plugin			""
tool_server	value	--tool-server			null
log_config_file	value	--log-config-file			null
max_log_len	value	--max-log-len			null
disable_fastapi_docs	bool	--disable-fastapi-docs !--no-disable-fastapi-docs			false
enable_prompt_tokens_details	bool	--enable-prompt-tokens-details !--no-enable-prompt-tokens-details			false
enable_server_load_tracking	bool	--enable-server-load-tracking !--no-enable-server-load-tracking			false
enable_force_include_usage	bool	--enable-force-include-usage !--no-enable-force-include-usage			false
enable_tokenizer_info_endpoint	bool	--enable-tokenizer-info-endpoint !--no-enable-tokenizer-info-endpoint			false
enable_log_outputs	bool	--enable-log-outputs !--no-enable-log-outputs			false
h11_max_incomplete_event_size	value	--h11-max-incomplete-event-size	int		4194304
h11_max_header_count	value	--h11-max-header-count	int		256
log_error_stack	bool	--log-error-stack !--no-log-error-stack			false
model	value	--model			"Qwen/Qwen3-0.6B"
runner	value	--runner		auto,draft,generate,pooling	"auto"
convert	value	--convert		auto,classify,embed,none,reward	"auto"
task	value	--task		auto,classify,draft,embed,embedding,generate,reward,score,transcription,None	null
tokenizer	value	--tokenizer			null
tokenizer_mode	value	--tokenizer-mode		auto,custom,mistral,slow	"auto"
trust_remote_code	bool	--trust-remote-code !--no-trust-remote-code			false
dtype	value	--dtype		auto,bfloat16,float,float16,float32,half	"auto"
seed	value	--seed			null
hf_config_path	value	--hf-config-path			null
allowed_local_media_path	value	--allowed-local-media-path			""
allowed_media_domains	+	--allowed-media-domains			null
revision	value	--revision			null
code_revision	value	--code-revision			null
rope_scaling	value	--rope-scaling			{}
rope_theta	value	--rope-theta			null
tokenizer_revision	value	--tokenizer-revision			null
max_model_len	value	--max-model-len			null
quantization	value	--quantization -q			null
enforce_eager	bool	--enforce-eager !--no-enforce-eager			false
max_logprobs	value	--max-logprobs	int		20
logprobs_mode	value	--logprobs-mode		processed_logits,processed_logprobs,raw_logits,raw_logprobs	"raw_logprobs"
disable_sliding_window	bool	--disable-sliding-window !--no-disable-sliding-window			false
disable_cascade_attn	bool	--disable-cascade-attn !--no-disable-cascade-attn			false
skip_tokenizer_init	bool	--skip-tokenizer-init !--no-skip-tokenizer-init			false
enable_prompt_embeds	bool	--enable-prompt-embeds !--no-enable-prompt-embeds			false
served_model_name	+	--served-model-name			null
config_format	value	--config-format			"auto"
hf_token	?	--hf-token			null
hf_overrides	value	--hf-overrides			{}
pooler_config	value	--pooler-config			null
override_pooler_config	value	--override-pooler-config			null
logits_processor_pattern	value	--logits-processor-pattern			null
generation_config	value	--generation-config			"auto"
override_generation_config	value	--override-generation-config			{}
enable_sleep_mode	bool	--enable-sleep-mode !--no-enable-sleep-mode			false
model_impl	value	--model-impl			"auto"
override_attention_dtype	value	--override-attention-dtype			null
logits_processors	+	--logits-processors			null
io_processor_plugin	value	--io-processor-plugin			null
load_format	value	--load-format			"auto"
download_dir	value	--download-dir			null
safetensors_load_strategy	value	--safetensors-load-strategy			"lazy"
model_loader_extra_config	value	--model-loader-extra-config			{}
ignore_patterns	+	--ignore-patterns			null
use_tqdm_on_load	bool	--use-tqdm-on-load !--no-use-tqdm-on-load			true
pt_load_map_location	value	--pt-load-map-location			"cpu"
reasoning_parser	value	--reasoning-parser		deepseek_r1,glm45,openai_gptoss,granite,hunyuan_a13b,mistral,qwen3,seed_oss,step3	""
guided_decoding_backend	value	--guided-decoding-backend			null
guided_decoding_disable_fallback	value	--guided-decoding-disable-fallback			null
guided_decoding_disable_any_whitespace	value	--guided-decoding-disable-any-whitespace			null
guided_decoding_disable_additional_properties	value	--guided-decoding-disable-additional-properties			null
distributed_executor_backend	value	--distributed-executor-backend			null
pipeline_parallel_size	value	--pipeline-parallel-size -pp	int		1
tensor_parallel_size	value	--tensor-parallel-size -tp	int		1
decode_context_parallel_size	value	--decode-context-parallel-size -dcp	int		1
data_parallel_size	value	--data-parallel-size -dp	int		1
data_parallel_rank	value	--data-parallel-rank -dpn	int		null
data_parallel_start_rank	value	--data-parallel-start-rank -dpr	int		null
data_parallel_size_local	value	--data-parallel-size-local -dpl	int		null
data_parallel_address	value	--data-parallel-address -dpa			null
data_parallel_rpc_port	value	--data-parallel-rpc-port -dpp	int		null
data_parallel_backend	value	--data-parallel-backend -dpb			"mp"
data_parallel_hybrid_lb	bool	--data-parallel-hybrid-lb !--no-data-parallel-hybrid-lb			false
enable_expert_parallel	bool	--enable-expert-parallel !--no-enable-expert-parallel			false
enable_dbo	bool	--enable-dbo !--no-enable-dbo			false
dbo_decode_token_threshold	value	--dbo-decode-token-threshold	int		32
dbo_prefill_token_threshold	value	--dbo-prefill-token-threshold	int		512
enable_eplb	bool	--enable-eplb !--no-enable-eplb			false
eplb_config	value	--eplb-config			"EPLBConfig(window_size=1000, step_interval=3000, num_redundant_experts=0, log_balancedness=False)"
expert_placement_strategy	value	--expert-placement-strategy		linear,round_robin	"linear"
num_redundant_experts	value	--num-redundant-experts	int		null
eplb_window_size	value	--eplb-window-size	int		null
eplb_step_interval	value	--eplb-step-interval	int		null
eplb_log_balancedness	bool	--eplb-log-balancedness !--no-eplb-log-balancedness			null
max_parallel_loading_workers	value	--max-parallel-loading-workers			null
ray_workers_use_nsight	bool	--ray-workers-use-nsight !--no-ray-workers-use-nsight			false
disable_custom_all_reduce	bool	--disable-custom-all-reduce !--no-disable-custom-all-reduce			false
worker_cls	value	--worker-cls			"auto"
worker_extension_cls	value	--worker-extension-cls			""
enable_multimodal_encoder_data_parallel	true	--enable-multimodal-encoder-data-parallel			false
block_size	value	--block-size	int	1,8,16,32,64,128	null
gpu_memory_utilization	value	--gpu-memory-utilization	float		0.9
kv_cache_memory_bytes	value	--kv-cache-memory-bytes			null
swap_space	value	--swap-space	float		4
kv_cache_dtype	value	--kv-cache-dtype		auto,bfloat16,fp8,fp8_e4m3,fp8_e5m2,fp8_inc	"auto"
num_gpu_blocks_override	value	--num-gpu-blocks-override			null
enable_prefix_caching	bool	--enable-prefix-caching !--no-enable-prefix-caching			null
prefix_caching_hash_algo	value	--prefix-caching-hash-algo		sha256,sha256_cbor	"sha256"
cpu_offload_gb	value	--cpu-offload-gb	float		0
calculate_kv_scales	bool	--calculate-kv-scales !--no-calculate-kv-scales			false
kv_sharing_fast_prefill	bool	--kv-sharing-fast-prefill !--no-kv-sharing-fast-prefill			false
mamba_cache_dtype	value	--mamba-cache-dtype		auto,float32	"auto"
mamba_ssm_cache_dtype	value	--mamba-ssm-cache-dtype		auto,float32	"auto"
limit_mm_per_prompt	value	--limit-mm-per-prompt			{}
media_io_kwargs	value	--media-io-kwargs			{}
mm_processor_kwargs	value	--mm-processor-kwargs			null
mm_processor_cache_gb	value	--mm-processor-cache-gb	float		4
disable_mm_preprocessor_cache	true	--disable-mm-preprocessor-cache			false
mm_processor_cache_type	value	--mm-processor-cache-type		lru,shm	"lru"
mm_shm_cache_max_object_size_mb	value	--mm-shm-cache-max-object-size-mb	int		128
mm_encoder_tp_mode	value	--mm-encoder-tp-mode		data,weights	"weights"
interleave_mm_strings	bool	--interleave-mm-strings !--no-interleave-mm-strings			false
skip_mm_profiling	bool	--skip-mm-profiling !--no-skip-mm-profiling			false
video_pruning_rate	value	--video-pruning-rate			null
enable_lora	bool	--enable-lora !--no-enable-lora			null
enable_lora_bias	bool	--enable-lora-bias !--no-enable-lora-bias			false
max_loras	value	--max-loras	int		1
max_lora_rank	value	--max-lora-rank	int		16
lora_extra_vocab_size	value	--lora-extra-vocab-size	int		256
lora_dtype	value	--lora-dtype		auto,bfloat16,float16	"auto"
max_cpu_loras	value	--max-cpu-loras			null
fully_sharded_loras	bool	--fully-sharded-loras !--no-fully-sharded-loras			false
default_mm_loras	value	--default-mm-loras			null
show_hidden_metrics_for_version	value	--show-hidden-metrics-for-version			null
otlp_traces_endpoint	value	--otlp-traces-endpoint			null
collect_detailed_traces	+	--collect-detailed-traces		all,model,worker,None,model,worker,model,all,worker,model,worker,all,all,model,all,worker	null
max_num_batched_tokens	value	--max-num-batched-tokens			null
max_num_seqs	value	--max-num-seqs	int		null
max_num_partial_prefills	value	--max-num-partial-prefills	int		1
max_long_partial_prefills	value	--max-long-partial-prefills	int		1
cuda_graph_sizes	+	--cuda-graph-sizes	int		[]
long_prefill_token_threshold	value	--long-prefill-token-threshold	int		0
num_lookahead_slots	value	--num-lookahead-slots	int		0
scheduling_policy	value	--scheduling-policy		fcfs,priority	"fcfs"
enable_chunked_prefill	bool	--enable-chunked-prefill !--no-enable-chunked-prefill			null
disable_chunked_mm_input	bool	--disable-chunked-mm-input !--no-disable-chunked-mm-input			false
scheduler_cls	value	--scheduler-cls			"vllm.core.scheduler.Scheduler"
disable_hybrid_kv_cache_manager	bool	--disable-hybrid-kv-cache-manager !--no-disable-hybrid-kv-cache-manager			false
async_scheduling	bool	--async-scheduling !--no-async-scheduling			false
speculative_config	value	--speculative-config			null
kv_transfer_config	value	--kv-transfer-config			null
kv_events_config	value	--kv-events-config			null
compilation_config	value	--compilation-config -O			"{\"level\":null,\"debug_dump_path\":\"\",\"cache_dir\":\"\",\"backend\":\"\",\"custom_ops\":[],\"splitting_ops\":null,\"use_inductor\":true,\"compile_sizes\":null,\"inductor_compile_config\":{\"enable_auto_functionalized_v2\":false},\"inductor_passes\":{},\"cudagraph_mode\":null,\"use_cudagraph\":true,\"cudagraph_num_of_warmups\":0,\"cudagraph_capture_sizes\":null,\"cudagraph_copy_inputs\":false,\"full_cuda_graph\":false,\"use_inductor_graph_partition\":false,\"pass_config\":{},\"max_capture_size\":null,\"local_cache_dir\":null}"
additional_config	value	--additional-config			{}
structured_outputs_config	value	--structured-outputs-config			"StructuredOutputsConfig(backend='auto', disable_fallback=False, disable_any_whitespace=False, disable_additional_properties=False, reasoning_parser='')"
disable_log_stats	true	--disable-log-stats			false
enable_log_requests	bool	--enable-log-requests !--no-enable-log-requests			false
disable_log_requests	bool	--disable-log-requests !--no-disable-log-requests			true
"""
