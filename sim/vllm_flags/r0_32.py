"""`vllm serve` arguments of vLLM 0.32.0: generated, do not edit by hand.

From vLLM 0.32.0's own parser (the wheel's vllm/engine/arg_utils.py + vllm/entrypoints/launchers/cli_args.py + vllm/entrypoints/cli/serve.py), dumped with
argparse by tools/vllm_serve_flags.py. Columns (tab-separated): dest, kind (true | bool | strbool |
value | ? | + | * | append), option strings ("!" marks one that sets a bool False), type (int, float or
empty), choices (comma-separated or empty), default (JSON).
"""

from __future__ import annotations

RELEASE = "0.32.0"
TABLE = r"""
headless	true	--headless			false
api_server_count	value	--api-server-count -asc	int		null
config	value	--config			null
grpc	true	--grpc			false
lora_modules	+	--lora-modules			null
chat_template	value	--chat-template			null
chat_template_content_format	value	--chat-template-content-format		auto,openai,string	"auto"
trust_request_chat_template	bool	--trust-request-chat-template !--no-trust-request-chat-template			false
trust_request_mm_kwargs	bool	--trust-request-mm-kwargs !--no-trust-request-mm-kwargs			false
default_chat_template_kwargs	value	--default-chat-template-kwargs			null
response_role	value	--response-role			"assistant"
return_tokens_as_token_ids	bool	--return-tokens-as-token-ids !--no-return-tokens-as-token-ids			false
enable_auto_tool_choice	bool	--enable-auto-tool-choice !--no-enable-auto-tool-choice			false
exclude_tools_when_tool_choice_none	bool	--exclude-tools-when-tool-choice-none !--no-exclude-tools-when-tool-choice-none			false
tool_call_parser	value	--tool-call-parser			null
tool_parser_plugin	value	--tool-parser-plugin			""
tool_strict_level	value	--tool-strict-level		auto,function,parameter	"auto"
tool_server	value	--tool-server			null
max_log_len	value	--max-log-len			null
enable_prompt_tokens_details	bool	--enable-prompt-tokens-details !--no-enable-prompt-tokens-details			false
enable_per_request_metrics	bool	--enable-per-request-metrics !--no-enable-per-request-metrics			false
enable_server_load_tracking	bool	--enable-server-load-tracking !--no-enable-server-load-tracking			false
enable_force_include_usage	bool	--enable-force-include-usage !--no-enable-force-include-usage			false
sse_keep_alive_interval	value	--sse-keep-alive-interval	int		0
enable_tokenizer_info_endpoint	bool	--enable-tokenizer-info-endpoint !--no-enable-tokenizer-info-endpoint			false
enable_log_outputs	bool	--enable-log-outputs !--no-enable-log-outputs			false
enable_log_deltas	bool	--enable-log-deltas !--no-enable-log-deltas			true
cohere_is_reasoning_model	bool	--cohere-is-reasoning-model !--no-cohere-is-reasoning-model			true
cohere_format	value	--cohere-format			"cmd4"
anthropic_disabled_thinking_effort	value	--anthropic-disabled-thinking-effort		auto,high,low,max,medium,none,xhigh	"auto"
log_error_stack	bool	--log-error-stack !--no-log-error-stack			false
tokens_only	bool	--tokens-only !--no-tokens-only			false
enable_scale_out	bool	--enable-scale-out !--no-enable-scale-out			false
fingerprint_mode	value	--fingerprint-mode		custom,full,hash,none	"full"
fingerprint_value	value	--fingerprint-value			null
host	value	--host			null
port	value	--port	int		8000
grpc_port	value	--grpc-port			null
data_parallel_supervisor_port	value	--data-parallel-supervisor-port	int		9256
dp_supervisor_probe_interval_s	value	--dp-supervisor-probe-interval-s	float		5.0
dp_supervisor_probe_timeout_s	value	--dp-supervisor-probe-timeout-s	float		5.0
dp_supervisor_probe_failure_threshold	value	--dp-supervisor-probe-failure-threshold	int		3
uds	value	--uds			null
uvicorn_log_level	value	--uvicorn-log-level		critical,debug,error,info,trace,warning	"info"
disable_uvicorn_access_log	bool	--disable-uvicorn-access-log !--no-disable-uvicorn-access-log			false
disable_access_log_for_endpoints	value	--disable-access-log-for-endpoints			null
allow_credentials	bool	--allow-credentials !--no-allow-credentials			false
allowed_origins	value	--allowed-origins			[]
allowed_methods	value	--allowed-methods			["*"]
allowed_headers	value	--allowed-headers			["*"]
api_key	+	--api-key			null
ssl_keyfile	value	--ssl-keyfile			null
ssl_certfile	value	--ssl-certfile			null
ssl_ca_certs	value	--ssl-ca-certs			null
enable_ssl_refresh	bool	--enable-ssl-refresh !--no-enable-ssl-refresh			false
ssl_cert_reqs	value	--ssl-cert-reqs	int		0
ssl_ciphers	value	--ssl-ciphers			null
root_path	value	--root-path			null
middleware	append	--middleware			[]
enable_request_id_headers	bool	--enable-request-id-headers !--no-enable-request-id-headers			false
disable_fastapi_docs	bool	--disable-fastapi-docs !--no-disable-fastapi-docs			false
h11_max_incomplete_event_size	value	--h11-max-incomplete-event-size	int		4194304
h11_max_header_count	value	--h11-max-header-count	int		256
enable_offline_docs	bool	--enable-offline-docs !--no-enable-offline-docs			false
enable_flash_late_interaction	bool	--enable-flash-late-interaction !--no-enable-flash-late-interaction			true
model	value	--model			"Qwen/Qwen3-0.6B"
runner	value	--runner		auto,draft,generate,pooling	"auto"
convert	value	--convert		auto,classify,embed,none	"auto"
tokenizer	value	--tokenizer			null
tokenizer_mode	value	--tokenizer-mode			"auto"
trust_remote_code	bool	--trust-remote-code !--no-trust-remote-code			false
dtype	value	--dtype		auto,bfloat16,float,float16,float32,half	"auto"
seed	value	--seed	int		0
hf_config_path	value	--hf-config-path			null
allowed_local_media_path	value	--allowed-local-media-path			""
allowed_media_domains	+	--allowed-media-domains			null
revision	value	--revision			null
code_revision	value	--code-revision			null
tokenizer_revision	value	--tokenizer-revision			null
max_model_len	value	--max-model-len			null
quantization	value	--quantization -q			null
quantization_config	value	--quantization-config			null
allow_deprecated_quantization	bool	--allow-deprecated-quantization !--no-allow-deprecated-quantization			false
enforce_eager	bool	--enforce-eager !--no-enforce-eager			false
enable_return_routed_experts	bool	--enable-return-routed-experts !--no-enable-return-routed-experts			false
return_sampling_mask	bool	--return-sampling-mask !--no-return-sampling-mask			false
max_logprobs	value	--max-logprobs	int		20
logprobs_mode	value	--logprobs-mode		processed_logits,processed_logprobs,raw_logits,raw_logprobs	"raw_logprobs"
use_fp64_gumbel	bool	--use-fp64-gumbel !--no-use-fp64-gumbel			false
enable_trace_replay	bool	--enable-trace-replay !--no-enable-trace-replay			false
disable_sliding_window	bool	--disable-sliding-window !--no-disable-sliding-window			false
disable_cascade_attn	bool	--disable-cascade-attn !--no-disable-cascade-attn			null
skip_tokenizer_init	bool	--skip-tokenizer-init !--no-skip-tokenizer-init			false
enable_prompt_embeds	bool	--enable-prompt-embeds !--no-enable-prompt-embeds			false
served_model_name	+	--served-model-name			null
config_format	value	--config-format			"auto"
hf_token	?	--hf-token			null
hf_overrides	value	--hf-overrides			{}
model_class_overrides	value	--model-class-overrides			{}
pooler_config	value	--pooler-config			null
generation_config	value	--generation-config			"auto"
override_generation_config	value	--override-generation-config			{}
enable_sleep_mode	bool	--enable-sleep-mode !--no-enable-sleep-mode			false
sleep_mode_offload_cudagraph	bool	--sleep-mode-offload-cudagraph !--no-sleep-mode-offload-cudagraph			false
sleep_preserve_parameter_names	+	--sleep-preserve-parameter-names			[]
enable_cumem_allocator	bool	--enable-cumem-allocator !--no-enable-cumem-allocator			false
enable_nccl_comm_suspend	bool	--enable-nccl-comm-suspend !--no-enable-nccl-comm-suspend			false
model_impl	value	--model-impl			"auto"
logits_processors	+	--logits-processors			null
io_processor_plugin	value	--io-processor-plugin			null
renderer_num_workers	value	--renderer-num-workers	int		1
load_format	value	--load-format			"auto"
download_dir	value	--download-dir			null
safetensors_load_strategy	value	--safetensors-load-strategy		eager,lazy,prefetch,torchao,None	null
safetensors_prefetch_num_threads	value	--safetensors-prefetch-num-threads	int		8
safetensors_prefetch_block_size	value	--safetensors-prefetch-block-size			16777216
model_loader_extra_config	value	--model-loader-extra-config			{}
ignore_patterns	+	--ignore-patterns			["original/**/*"]
use_tqdm_on_load	bool	--use-tqdm-on-load !--no-use-tqdm-on-load			true
pt_load_map_location	value	--pt-load-map-location			"cpu"
attention_backend	value	--attention-backend			null
mamba_backend	value	--mamba-backend			null
mamba_ssu_algorithm	value	--mamba-ssu-algorithm		auto,horizontal,simple,vertical,None	null
enable_mamba_cache_stochastic_rounding	bool	--enable-mamba-cache-stochastic-rounding !--no-enable-mamba-cache-stochastic-rounding			false
mamba_cache_philox_rounds	value	--mamba-cache-philox-rounds	int		0
reasoning_parser	value	--reasoning-parser			""
reasoning_parser_plugin	value	--reasoning-parser-plugin			""
distributed_executor_backend	value	--distributed-executor-backend			null
pipeline_parallel_size	value	--pipeline-parallel-size -pp	int		1
master_addr	value	--master-addr			"127.0.0.1"
master_port	value	--master-port	int		29501
nnodes	value	--nnodes -n	int		1
node_rank	value	--node-rank -r	int		0
distributed_timeout_seconds	value	--distributed-timeout-seconds			null
cpu_distributed_timeout_seconds	value	--cpu-distributed-timeout-seconds			null
numa_bind	bool	--numa-bind !--no-numa-bind			false
numa_bind_nodes	+	--numa-bind-nodes			null
numa_bind_cpus	+	--numa-bind-cpus			null
device_ids	value	--device-ids			null
tensor_parallel_size	value	--tensor-parallel-size -tp	int		1
decode_context_parallel_size	value	--decode-context-parallel-size -dcp	int		1
dcp_comm_backend	value	--dcp-comm-backend		a2a,ag_rs,None	null
dcp_q_replicate	bool	--dcp-q-replicate !--no-dcp-q-replicate			null
dcp_kv_cache_interleave_size	value	--dcp-kv-cache-interleave-size	int		1
cp_kv_cache_interleave_size	value	--cp-kv-cache-interleave-size	int		null
prefill_context_parallel_size	value	--prefill-context-parallel-size -pcp	int		1
data_parallel_size	value	--data-parallel-size -dp	int		1
data_parallel_rank	value	--data-parallel-rank -dpn	int		null
data_parallel_start_rank	value	--data-parallel-start-rank -dpr	int		null
data_parallel_size_local	value	--data-parallel-size-local -dpl	int		null
data_parallel_address	value	--data-parallel-address -dpa			null
data_parallel_rpc_port	value	--data-parallel-rpc-port -dpp	int		null
data_parallel_backend	value	--data-parallel-backend -dpb			"mp"
data_parallel_hybrid_lb	bool	--data-parallel-hybrid-lb !--no-data-parallel-hybrid-lb -dph			false
data_parallel_external_lb	bool	--data-parallel-external-lb !--no-data-parallel-external-lb -dpe			false
data_parallel_multi_port_external_lb	true	--data-parallel-multi-port-external-lb -dpm			false
enable_hc_sp	bool	--enable-hc-sp !--no-enable-hc-sp			false
enable_expert_parallel	bool	--enable-expert-parallel !--no-enable-expert-parallel -ep			false
enable_batch_sharded_sampling	bool	--enable-batch-sharded-sampling !--no-enable-batch-sharded-sampling			null
enable_ep_weight_filter	bool	--enable-ep-weight-filter !--no-enable-ep-weight-filter			false
all2all_backend	value	--all2all-backend		allgather_reducescatter,deepep_high_throughput,deepep_low_latency,deepep_v2,flashinfer_all2allv,flashinfer_nvlink_one_sided,flashinfer_nvlink_two_sided,moonep,mori_high_throughput,mori_low_latency,naive,nixl_ep,pplx	"allgather_reducescatter"
enable_dbo	bool	--enable-dbo !--no-enable-dbo			false
enable_shm_tensor_arena	bool	--enable-shm-tensor-arena !--no-enable-shm-tensor-arena			false
ubatch_size	value	--ubatch-size	int		0
enable_elastic_ep	bool	--enable-elastic-ep !--no-enable-elastic-ep			false
elastic_ep_max_dp_size	value	--elastic-ep-max-dp-size	int		null
dbo_decode_token_threshold	value	--dbo-decode-token-threshold	int		32
dp_sync_interval	value	--dp-sync-interval	int		16
dbo_prefill_token_threshold	value	--dbo-prefill-token-threshold	int		512
disable_nccl_for_dp_synchronization	bool	--disable-nccl-for-dp-synchronization !--no-disable-nccl-for-dp-synchronization			null
enable_eplb	bool	--enable-eplb !--no-enable-eplb			false
eplb_config	value	--eplb-config			"EPLBConfig(window_size=1000, step_interval=3000, num_redundant_experts=0, log_balancedness=False, log_balancedness_interval=1, use_async=True, policy='default', communicator=None, enable_migration_batching=False)"
expert_placement_strategy	value	--expert-placement-strategy		linear,round_robin	"linear"
max_parallel_loading_workers	value	--max-parallel-loading-workers			null
ray_workers_use_nsight	bool	--ray-workers-use-nsight !--no-ray-workers-use-nsight			false
disable_custom_all_reduce	bool	--disable-custom-all-reduce !--no-disable-custom-all-reduce			false
worker_cls	value	--worker-cls			"auto"
worker_extension_cls	value	--worker-extension-cls			""
enable_fault_tolerance	bool	--enable-fault-tolerance !--no-enable-fault-tolerance			false
fault_tolerance_config	value	--fault-tolerance-config			"FaultToleranceConfig(engine_recovery_timeout_sec=120)"
block_size	value	--block-size	int		null
gpu_memory_utilization	value	--gpu-memory-utilization --device-memory-utilization	float		0.92
kv_cache_memory_bytes	value	--kv-cache-memory-bytes			null
kv_cache_dtype	value	--kv-cache-dtype		auto,bfloat16,float16,fp8,fp8_ds_mla,fp8_e4m3,fp8_e5m2,fp8_inc,fp8_per_token_head,int4_per_token_head,int8_per_token_head,nvfp4,nvfp4_4over6,nvfp4_ds_mla,turboquant_3bit_nc,turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_k8v4,ultraquant_4bit	"auto"
num_gpu_blocks_override	value	--num-gpu-blocks-override			null
enable_prefix_caching	bool	--enable-prefix-caching !--no-enable-prefix-caching			null
prefix_caching_hash_algo	value	--prefix-caching-hash-algo		sha256,sha256_cbor,xxhash,xxhash_cbor	"sha256"
prefix_cache_retention_interval	value	--prefix-cache-retention-interval			0
kv_cache_dtype_skip_layers	+	--kv-cache-dtype-skip-layers			[]
kv_sharing_fast_prefill	bool	--kv-sharing-fast-prefill !--no-kv-sharing-fast-prefill			false
swa_bounded_replay	bool	--swa-bounded-replay !--no-swa-bounded-replay			true
mamba_cache_dtype	value	--mamba-cache-dtype		auto,bfloat16,float16,float32	"auto"
mamba_ssm_cache_dtype	value	--mamba-ssm-cache-dtype		auto,bfloat16,float16,float32	"auto"
mamba_block_size	value	--mamba-block-size			null
prefix_match_unit	value	--prefix-match-unit			null
mamba_cache_mode	value	--mamba-cache-mode		align,none	"none"
enable_mamba_shared_prefix_checkpoint	bool	--enable-mamba-shared-prefix-checkpoint !--no-enable-mamba-shared-prefix-checkpoint			false
replayssm_buffer_len	value	--replayssm-buffer-len	int		16
use_replayssm	bool	--use-replayssm !--no-use-replayssm			false
kv_offloading_size	value	--kv-offloading-size			null
kv_offloading_backend	value	--kv-offloading-backend		lmcache,native	"native"
offload_backend	value	--offload-backend		auto,prefetch,uva	"auto"
cpu_offload_gb	value	--cpu-offload-gb	float		0
cpu_offload_params	+	--cpu-offload-params			"set()"
offload_group_size	value	--offload-group-size	int		0
offload_num_in_group	value	--offload-num-in-group	int		1
offload_prefetch_step	value	--offload-prefetch-step	int		1
offload_params	+	--offload-params			"set()"
language_model_only	bool	--language-model-only !--no-language-model-only			false
limit_mm_per_prompt	value	--limit-mm-per-prompt			{}
enable_mm_embeds	bool	--enable-mm-embeds !--no-enable-mm-embeds			false
media_io_kwargs	value	--media-io-kwargs			{}
mm_processor_kwargs	value	--mm-processor-kwargs			null
mm_processor_cache_gb	value	--mm-processor-cache-gb	float		4
mm_processor_cache_type	value	--mm-processor-cache-type		lru,shm	"lru"
mm_hasher_algorithm	value	--mm-hasher-algorithm		blake3,sha256,sha512	"blake3"
mm_shm_cache_max_object_size_mb	value	--mm-shm-cache-max-object-size-mb	int		128
mm_encoder_only	bool	--mm-encoder-only !--no-mm-encoder-only			false
mm_encoder_tp_mode	value	--mm-encoder-tp-mode		data,weights	"weights"
mm_encoder_attn_backend	value	--mm-encoder-attn-backend			null
mm_encoder_attn_dtype	value	--mm-encoder-attn-dtype		fp8,None	null
mm_encoder_fp8_scale_path	value	--mm-encoder-fp8-scale-path			null
mm_encoder_fp8_scale_save_path	value	--mm-encoder-fp8-scale-save-path			null
mm_encoder_fp8_scale_save_margin	value	--mm-encoder-fp8-scale-save-margin	float		1.5
interleave_mm_strings	bool	--interleave-mm-strings !--no-interleave-mm-strings			false
skip_mm_profiling	bool	--skip-mm-profiling !--no-skip-mm-profiling			false
video_pruning_rate	value	--video-pruning-rate			null
video_pruning_method	value	--video-pruning-method		evs,vidcom2	"evs"
mm_tensor_ipc	value	--mm-tensor-ipc		direct_rpc,torch_shm	"direct_rpc"
mm_processor_device	value	--mm-processor-device		auto,cpu	"auto"
mm_ipc_gpu_memory_gb	value	--mm-ipc-gpu-memory-gb	float		0
mm_device_do_normalize	bool	--mm-device-do-normalize !--no-mm-device-do-normalize			null
enable_lora	bool	--enable-lora !--no-enable-lora			null
max_loras	value	--max-loras	int		1
max_lora_rank	value	--max-lora-rank	int	1,8,16,32,64,128,256,320,512	16
lora_dtype	value	--lora-dtype		auto,bfloat16,float16	"auto"
enable_tower_connector_lora	bool	--enable-tower-connector-lora !--no-enable-tower-connector-lora			false
max_cpu_loras	value	--max-cpu-loras			null
fully_sharded_loras	bool	--fully-sharded-loras !--no-fully-sharded-loras			false
lora_target_modules	+	--lora-target-modules			null
default_mm_loras	value	--default-mm-loras			null
specialize_active_lora	bool	--specialize-active-lora !--no-specialize-active-lora			false
enable_mixed_moe_lora_format	bool	--enable-mixed-moe-lora-format !--no-enable-mixed-moe-lora-format			false
enable_moe_shared_loras	bool	--enable-moe-shared-loras !--no-enable-moe-shared-loras			false
max_lora_cls_labels	value	--max-lora-cls-labels			null
logging_config	value	--logging-config			"==SUPPRESS=="
log_level	value	--log-level		CRITICAL,ERROR,WARNING,INFO,DEBUG,NOTSET	"==SUPPRESS=="
log_config_file	value	--log-config-file			"==SUPPRESS=="
show_hidden_metrics_for_version	value	--show-hidden-metrics-for-version			null
otlp_traces_endpoint	value	--otlp-traces-endpoint			null
collect_detailed_traces	+	--collect-detailed-traces		all,model,worker,None	null
per_request_spec_decode_metrics	value	--per-request-spec-decode-metrics		detailed,none,summary	"none"
kv_cache_metrics	bool	--kv-cache-metrics !--no-kv-cache-metrics			false
kv_cache_metrics_sample	value	--kv-cache-metrics-sample	float		0.01
custom_histogram_buckets	value	--custom-histogram-buckets			null
cudagraph_metrics	bool	--cudagraph-metrics !--no-cudagraph-metrics			false
enable_layerwise_nvtx_tracing	bool	--enable-layerwise-nvtx-tracing !--no-enable-layerwise-nvtx-tracing			false
enable_mfu_metrics	bool	--enable-mfu-metrics !--no-enable-mfu-metrics			false
enable_logging_iteration_details	bool	--enable-logging-iteration-details !--no-enable-logging-iteration-details			false
jit_monitor_mode	value	--jit-monitor-mode		error,warn	"warn"
jit_monitor_verbose	bool	--jit-monitor-verbose !--no-jit-monitor-verbose			false
max_num_batched_tokens	value	--max-num-batched-tokens			null
max_num_scheduled_tokens	value	--max-num-scheduled-tokens			null
max_num_seqs	value	--max-num-seqs	int		null
max_num_active_seqs	value	--max-num-active-seqs			null
max_num_queued_reqs	value	--max-num-queued-reqs			null
max_num_queued_tokens	value	--max-num-queued-tokens			null
long_prefill_token_threshold	value	--long-prefill-token-threshold	int		0
long_prefill_token_threshold_adaptive	bool	--long-prefill-token-threshold-adaptive !--no-long-prefill-token-threshold-adaptive			false
scheduling_policy	value	--scheduling-policy		fcfs,priority	"fcfs"
enable_chunked_prefill	bool	--enable-chunked-prefill !--no-enable-chunked-prefill			null
disable_chunked_mm_input	bool	--disable-chunked-mm-input !--no-disable-chunked-mm-input			false
scheduler_cls	value	--scheduler-cls			null
scheduler_reserve_full_isl	bool	--scheduler-reserve-full-isl !--no-scheduler-reserve-full-isl			true
watermark	value	--watermark	float		0.0
prefill_schedule_interval	value	--prefill-schedule-interval	int		1
disable_hybrid_kv_cache_manager	bool	--disable-hybrid-kv-cache-manager !--no-disable-hybrid-kv-cache-manager			null
async_scheduling	bool	--async-scheduling !--no-async-scheduling			null
stream_interval	value	--stream-interval	int		1
cudagraph_capture_sizes	+	--cudagraph-capture-sizes	int		null
max_cudagraph_capture_size	value	--max-cudagraph-capture-size	int		null
ir_op_priority	value	--ir-op-priority			"IrOpPriorityConfig(rms_norm=[], fused_add_rms_norm=[], gelu_and_mul_sparse=[])"
enable_flashinfer_autotune	bool	--enable-flashinfer-autotune !--no-enable-flashinfer-autotune			null
moe_backend	value	--moe-backend		aiter,aiter_mega_moe,aiter_triton_mxfp4_bf16,auto,b12x,batched_triton,cutlass,deep_gemm,deep_gemm_mega_moe,emulation,flashinfer_b12x,flashinfer_cutedsl,flashinfer_cutlass,flashinfer_moe_ep_cutedsl,flashinfer_moe_ep_mega_deep_gemm,flashinfer_trtllm,flydsl,hpc,humming,marlin,rdna3,triton,triton_unfused	"auto"
linear_backend	value	--linear-backend		aiter,auto,b12x,conch,cutlass,deep_gemm,emulation,exllama,fbgemm,flashinfer_b12x,flashinfer_cudnn,flashinfer_cutedsl,flashinfer_cutlass,flashinfer_trtllm,humming,machete,marlin,torch,triton,xpu,xpu_woq	"auto"
sparse_indexer_topk_backend	value	--sparse-indexer-topk-backend		aiter,auto,cooperative,deep_select,flashinfer,per_row,persistent,torch	"auto"
speculative_config	value	--speculative-config -sc			null
spec_method	value	--spec-method		bailing_hybrid_mtp,bailing_hybrid_v3_mtp,custom_class,deepseek_mtp,dflash,dots3_note_mtp,draft_model,dspark,eagle,eagle3,ernie_mtp,exaone4_5_mtp,exaone_moe_mtp,extract_hidden_states,gemma4_mtp,glm4_moe_lite_mtp,glm4_moe_mtp,glm5_next_mtp,glm_ocr_mtp,hy_v3_mtp,hy_v4_mtp,inkling_mtp,kimi_k3_mtp,longcat_flash_mtp,medusa,mimo_mtp,mimo_v2_mtp,minimax_m3_mtp,mlp_speculator,mtp,nemotron_h_mtp,ngram,ngram_gpu,pangu_ultra_moe_mtp,qwen3_5_mtp,qwen3_next_mtp,qwen4_exp_mtp,step3p5_mtp,suffix,None	null
spec_model	value	--spec-model			null
spec_tokens	value	--spec-tokens	int		null
watermark_config	value	--watermark-config			null
diffusion_config	value	--diffusion-config -dc			null
kv_transfer_config	value	--kv-transfer-config			null
kv_events_config	value	--kv-events-config			null
ec_transfer_config	value	--ec-transfer-config			null
ec_manager_config	value	--ec-manager-config			"EncoderCacheManagerConfig(encoder_cache_manager_cls=None, manager_config={})"
compilation_config	value	--compilation-config -cc			"{'mode': None, 'debug_dump_path': None, 'cache_dir': '', 'compile_cache_save_format': 'binary', 'backend': 'inductor', 'custom_ops': [], 'ir_enable_torch_wrap': None, 'splitting_ops': None, 'compile_mm_encoder': False, 'cudagraph_mm_encoder': False, 'encoder_cudagraph_token_budgets': [], 'encoder_cudagraph_max_vision_items_per_batch': 0, 'encoder_cudagraph_max_frames_per_batch': None, 'cudagraph_decoder_replay': True, 'decoder_replay_cudagraph_capture_sizes': [], 'decoder_replay_trim_threshold': 768, 'compile_sizes': None, 'compile_ranges_endpoints': None, 'inductor_compile_config': {'enable_auto_functionalized_v2': False}, 'inductor_passes': {}, 'cudagraph_mode': None, 'cudagraph_num_of_warmups': 0, 'cudagraph_capture_sizes': None, 'cudagraph_copy_inputs': False, 'cudagraph_specialize_lora': True, 'use_inductor_graph_partition': None, 'pass_config': {}, 'max_cudagraph_capture_size': None, 'dynamic_shapes_config': {'type': <DynamicShapesType.BACKED: 'backed'>, 'evaluate_guards': False, 'assume_32_bit_indexing': False}, 'local_cache_dir': None, 'fast_moe_cold_start': None, 'static_all_moe_layers': []}"
attention_config	value	--attention-config -ac			"AttentionConfig(backend=None, minimax_m3_msa_decode_backend='triton', backend_per_kind={}, flash_attn_version=None, flash_attn_max_num_splits_for_cuda_graph=32, tokenspeed_mla_min_split_kv=1, tq_max_kv_splits_for_cuda_graph=32, use_trtllm_attention=None, disable_flashinfer_q_quantization=False, mla_prefill_backend=None, use_prefill_query_quantization=False, indexer_kv_dtype='auto', indexer_sparse_logits=False, hisparse_config=None, use_non_causal=False, sparse_mla_force_mqa=False, sparse_mla_prefill_workspace_factor=None, flex_attn_block_m=None, flex_attn_block_n=None, flex_attn_q_block_size=None, flex_attn_kv_block_size=None)"
engram_config	value	--engram-config			null
reasoning_config	value	--reasoning-config			null
kernel_config	value	--kernel-config			"KernelConfig(ir_op_priority=IrOpPriorityConfig(rms_norm=[], fused_add_rms_norm=[], gelu_and_mul_sparse=[]), enable_flashinfer_autotune=None, enable_rocm_segmented_attn_autotune=False, enable_cutedsl_warmup=True, enable_jit_warmup=True, moe_backend='auto', sparse_indexer_topk_backend='auto', linear_backend='auto', linear_backend_per_quant=None)"
additional_config	value	--additional-config			{}
structured_outputs_config	value	--structured-outputs-config			"StructuredOutputsConfig(backend='auto', disable_any_whitespace=False, disable_additional_properties=False, reasoning_parser='', reasoning_parser_plugin='', enable_in_reasoning=False)"
aux_output_config	value	--aux-output-config			"AuxOutputConfig(enable_return_routed_experts=False, max_bytes=None)"
profiler_config	value	--profiler-config			"ProfilerConfig(profiler=None, torch_profiler_dir='', torch_profiler_activities=None, proton_profiler_dir='', proton_context='shadow', proton_data='tree', proton_backend=None, proton_mode=None, proton_hook=None, proton_output_format=None, proton_graph_attribution=False, torch_profiler_with_stack=True, torch_profiler_with_flops=False, torch_profiler_use_gzip=True, torch_profiler_dump_cuda_time_total=True, torch_profiler_record_shapes=False, torch_profiler_with_memory=False, capture_torch_profiler=False, detailed_trace_annotation=False, ignore_frontend=False, delay_iterations=0, max_iterations=0, warmup_iterations=0, active_iterations=5, wait_iterations=0)"
optimization_level	value	--optimization-level			2
performance_mode	value	--performance-mode		balanced,interactivity,throughput	"balanced"
weight_transfer_config	value	--weight-transfer-config			null
disable_log_stats	true	--disable-log-stats			false
aggregate_engine_logging	true	--aggregate-engine-logging			false
fail_on_environ_validation	bool	--fail-on-environ-validation !--no-fail-on-environ-validation			false
shutdown_timeout	value	--shutdown-timeout	int		0
gdn_prefill_backend	value	--gdn-prefill-backend		flashinfer,triton,cutedsl,aiter_flydsl	null
kda_prefill_backend	value	--kda-prefill-backend		auto,triton,flashkda,flashinfer,fused	null
kda_decode_backend	value	--kda-decode-backend		auto,native,flashinfer,triton	null
enable_log_requests	bool	--enable-log-requests !--no-enable-log-requests			false
"""
