"""`vllm serve` arguments of vLLM 0.8.5.post1: generated, do not edit by hand.

From vLLM 0.8.5.post1's own parser (the wheel's vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py + vllm/entrypoints/cli/serve.py), dumped with
argparse by tools/vllm_serve_flags.py. Columns (tab-separated): dest, kind (true | bool | strbool |
value | ? | + | * | append), option strings ("!" marks one that sets a bool False), type (int, float or
empty), choices (comma-separated or empty), default (JSON).
"""

from __future__ import annotations

RELEASE = "0.8.5.post1"
TABLE = r"""
config	value	--config			""
host	value	--host			null
port	value	--port	int		8000
uvicorn_log_level	value	--uvicorn-log-level		debug,info,warning,error,critical,trace	"info"
disable_uvicorn_access_log	true	--disable-uvicorn-access-log			false
allow_credentials	true	--allow-credentials			false
allowed_origins	value	--allowed-origins			["*"]
allowed_methods	value	--allowed-methods			["*"]
allowed_headers	value	--allowed-headers			["*"]
api_key	value	--api-key			null
lora_modules	+	--lora-modules			null
prompt_adapters	+	--prompt-adapters			null
chat_template	value	--chat-template			null
chat_template_content_format	value	--chat-template-content-format		auto,string,openai	"auto"
response_role	value	--response-role			"assistant"
ssl_keyfile	value	--ssl-keyfile			null
ssl_certfile	value	--ssl-certfile			null
ssl_ca_certs	value	--ssl-ca-certs			null
enable_ssl_refresh	true	--enable-ssl-refresh			false
ssl_cert_reqs	value	--ssl-cert-reqs	int		0
root_path	value	--root-path			null
middleware	append	--middleware			[]
return_tokens_as_token_ids	true	--return-tokens-as-token-ids			false
disable_frontend_multiprocessing	true	--disable-frontend-multiprocessing			false
enable_request_id_headers	true	--enable-request-id-headers			false
enable_auto_tool_choice	true	--enable-auto-tool-choice			false
tool_call_parser	value	--tool-call-parser			null
tool_parser_plugin	value	--tool-parser-plugin			""
model	value	--model			"facebook/opt-125m"
task	value	--task		auto,generate,embedding,embed,classify,score,reward,transcription	"auto"
tokenizer	value	--tokenizer			null
hf_config_path	value	--hf-config-path			null
skip_tokenizer_init	true	--skip-tokenizer-init			false
revision	value	--revision			null
code_revision	value	--code-revision			null
tokenizer_revision	value	--tokenizer-revision			null
tokenizer_mode	value	--tokenizer-mode		auto,slow,mistral,custom	"auto"
trust_remote_code	true	--trust-remote-code			false
allowed_local_media_path	value	--allowed-local-media-path			null
load_format	value	--load-format		auto,pt,safetensors,npcache,dummy,tensorizer,sharded_state,gguf,bitsandbytes,mistral,runai_streamer,runai_streamer_sharded,fastsafetensors	"auto"
download_dir	value	--download-dir			null
model_loader_extra_config	value	--model-loader-extra-config			{}
use_tqdm_on_load	bool	--use-tqdm-on-load !--no-use-tqdm-on-load			true
config_format	value	--config-format		auto,hf,mistral	"auto"
dtype	value	--dtype		auto,half,float16,bfloat16,float,float32	"auto"
max_model_len	value	--max-model-len			null
guided_decoding_backend	value	--guided-decoding-backend		auto,guidance,xgrammar	"auto"
reasoning_parser	value	--reasoning-parser		deepseek_r1,granite	null
logits_processor_pattern	value	--logits-processor-pattern			null
model_impl	value	--model-impl		auto,vllm,transformers	"auto"
distributed_executor_backend	value	--distributed-executor-backend		external_launcher,mp,ray,uni,None	null
pipeline_parallel_size	value	--pipeline-parallel-size -pp	int		1
tensor_parallel_size	value	--tensor-parallel-size -tp	int		1
data_parallel_size	value	--data-parallel-size -dp	int		1
enable_expert_parallel	bool	--enable-expert-parallel !--no-enable-expert-parallel			false
max_parallel_loading_workers	value	--max-parallel-loading-workers			null
ray_workers_use_nsight	bool	--ray-workers-use-nsight !--no-ray-workers-use-nsight			false
disable_custom_all_reduce	bool	--disable-custom-all-reduce !--no-disable-custom-all-reduce			false
block_size	value	--block-size	int	1,8,16,32,64,128	null
gpu_memory_utilization	value	--gpu-memory-utilization	float		0.9
swap_space	value	--swap-space	float		4
kv_cache_dtype	value	--kv-cache-dtype		auto,fp8,fp8_e4m3,fp8_e5m2	"auto"
num_gpu_blocks_override	value	--num-gpu-blocks-override			null
enable_prefix_caching	bool	--enable-prefix-caching !--no-enable-prefix-caching			null
prefix_caching_hash_algo	value	--prefix-caching-hash-algo		builtin,sha256	"builtin"
cpu_offload_gb	value	--cpu-offload-gb	float		0
calculate_kv_scales	bool	--calculate-kv-scales !--no-calculate-kv-scales			false
disable_sliding_window	true	--disable-sliding-window			false
use_v2_block_manager	true	--use-v2-block-manager			true
seed	value	--seed	int		null
max_logprobs	value	--max-logprobs	int		20
disable_log_stats	true	--disable-log-stats			false
quantization	value	--quantization -q		aqlm,awq,deepspeedfp,tpu_int8,fp8,ptpc_fp8,fbgemm_fp8,modelopt,nvfp4,marlin,bitblas,gguf,gptq_marlin_24,gptq_marlin,gptq_bitblas,awq_marlin,gptq,compressed-tensors,bitsandbytes,qqq,hqq,experts_int8,neuron_quant,ipex,quark,moe_wna16,torchao,None	null
rope_scaling	value	--rope-scaling			null
rope_theta	value	--rope-theta	float		null
hf_token	?	--hf-token			null
hf_overrides	value	--hf-overrides			null
enforce_eager	true	--enforce-eager			false
max_seq_len_to_capture	value	--max-seq-len-to-capture	int		8192
tokenizer_pool_size	value	--tokenizer-pool-size	int		0
tokenizer_pool_type	value	--tokenizer-pool-type			"ray"
tokenizer_pool_extra_config	value	--tokenizer-pool-extra-config			{}
limit_mm_per_prompt	value	--limit-mm-per-prompt			{}
mm_processor_kwargs	value	--mm-processor-kwargs			null
disable_mm_preprocessor_cache	true	--disable-mm-preprocessor-cache			false
enable_lora	bool	--enable-lora !--no-enable-lora			null
enable_lora_bias	bool	--enable-lora-bias !--no-enable-lora-bias			false
max_loras	value	--max-loras	int		1
max_lora_rank	value	--max-lora-rank	int		16
lora_extra_vocab_size	value	--lora-extra-vocab-size	int		256
lora_dtype	value	--lora-dtype		auto,bfloat16,float16	"auto"
long_lora_scaling_factors	+	--long-lora-scaling-factors			null
max_cpu_loras	value	--max-cpu-loras			null
fully_sharded_loras	bool	--fully-sharded-loras !--no-fully-sharded-loras			false
enable_prompt_adapter	bool	--enable-prompt-adapter !--no-enable-prompt-adapter			null
max_prompt_adapters	value	--max-prompt-adapters	int		1
max_prompt_adapter_token	value	--max-prompt-adapter-token	int		0
device	value	--device		auto,cpu,cuda,hpu,neuron,tpu,xpu	"auto"
speculative_config	value	--speculative-config			null
ignore_patterns	append	--ignore-patterns			[]
served_model_name	+	--served-model-name			null
qlora_adapter_name_or_path	value	--qlora-adapter-name-or-path			null
show_hidden_metrics_for_version	value	--show-hidden-metrics-for-version			null
otlp_traces_endpoint	value	--otlp-traces-endpoint			null
collect_detailed_traces	value	--collect-detailed-traces			null
disable_async_output_proc	true	--disable-async-output-proc			false
max_num_batched_tokens	value	--max-num-batched-tokens	int		null
max_num_seqs	value	--max-num-seqs	int		null
max_num_partial_prefills	value	--max-num-partial-prefills	int		1
max_long_partial_prefills	value	--max-long-partial-prefills	int		1
long_prefill_token_threshold	value	--long-prefill-token-threshold	int		0
num_lookahead_slots	value	--num-lookahead-slots	int		0
scheduler_delay_factor	value	--scheduler-delay-factor	float		0.0
preemption_mode	value	--preemption-mode		recompute,swap,None	null
num_scheduler_steps	value	--num-scheduler-steps	int		1
multi_step_stream_outputs	bool	--multi-step-stream-outputs !--no-multi-step-stream-outputs			true
scheduling_policy	value	--scheduling-policy		fcfs,priority	"fcfs"
enable_chunked_prefill	bool	--enable-chunked-prefill !--no-enable-chunked-prefill			null
disable_chunked_mm_input	bool	--disable-chunked-mm-input !--no-disable-chunked-mm-input			false
scheduler_cls	value	--scheduler-cls			"vllm.core.scheduler.Scheduler"
override_neuron_config	value	--override-neuron-config			null
override_pooler_config	value	--override-pooler-config			null
compilation_config	value	--compilation-config -O			null
kv_transfer_config	value	--kv-transfer-config			null
worker_cls	value	--worker-cls			"auto"
worker_extension_cls	value	--worker-extension-cls			""
generation_config	value	--generation-config			"auto"
override_generation_config	value	--override-generation-config			null
enable_sleep_mode	true	--enable-sleep-mode			false
additional_config	value	--additional-config			null
enable_reasoning	true	--enable-reasoning			false
disable_cascade_attn	true	--disable-cascade-attn			false
disable_log_requests	true	--disable-log-requests			false
max_log_len	value	--max-log-len	int		null
disable_fastapi_docs	true	--disable-fastapi-docs			false
enable_prompt_tokens_details	true	--enable-prompt-tokens-details			false
enable_server_load_tracking	true	--enable-server-load-tracking			false
"""
