"""`vllm serve` arguments of vLLM 0.6.6.post1: generated, do not edit by hand.

From vLLM 0.6.6.post1's own parser (the wheel's vllm/engine/arg_utils.py + vllm/entrypoints/openai/cli_args.py), dumped with
argparse by tools/vllm_serve_flags.py. Columns (tab-separated): dest, kind (true | bool | strbool |
value | ? | + | * | append), option strings ("!" marks one that sets a bool False), type (int, float or
empty), choices (comma-separated or empty), default (JSON).
"""

from __future__ import annotations

RELEASE = "0.6.6.post1"
TABLE = r"""
host	value	--host			null
port	value	--port	int		8000
uvicorn_log_level	value	--uvicorn-log-level		debug,info,warning,error,critical,trace	"info"
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
task	value	--task		auto,generate,embedding,embed,classify,score,reward	"auto"
tokenizer	value	--tokenizer			null
skip_tokenizer_init	true	--skip-tokenizer-init			false
revision	value	--revision			null
code_revision	value	--code-revision			null
tokenizer_revision	value	--tokenizer-revision			null
tokenizer_mode	value	--tokenizer-mode		auto,slow,mistral	"auto"
trust_remote_code	true	--trust-remote-code			false
allowed_local_media_path	value	--allowed-local-media-path			null
download_dir	value	--download-dir			null
load_format	value	--load-format		auto,pt,safetensors,npcache,dummy,tensorizer,sharded_state,gguf,bitsandbytes,mistral,runai_streamer	"auto"
config_format	value	--config-format		auto,hf,mistral	"auto"
dtype	value	--dtype		auto,half,float16,bfloat16,float,float32	"auto"
kv_cache_dtype	value	--kv-cache-dtype		auto,fp8,fp8_e5m2,fp8_e4m3	"auto"
quantization_param_path	value	--quantization-param-path			null
max_model_len	value	--max-model-len	int		null
guided_decoding_backend	value	--guided-decoding-backend		outlines,lm-format-enforcer,xgrammar	"xgrammar"
logits_processor_pattern	value	--logits-processor-pattern			null
distributed_executor_backend	value	--distributed-executor-backend		ray,mp	null
worker_use_ray	true	--worker-use-ray			false
pipeline_parallel_size	value	--pipeline-parallel-size -pp	int		1
tensor_parallel_size	value	--tensor-parallel-size -tp	int		1
max_parallel_loading_workers	value	--max-parallel-loading-workers	int		null
ray_workers_use_nsight	true	--ray-workers-use-nsight			false
block_size	value	--block-size	int	8,16,32,64,128	null
enable_prefix_caching	bool	--enable-prefix-caching !--no-enable-prefix-caching			null
disable_sliding_window	true	--disable-sliding-window			false
use_v2_block_manager	true	--use-v2-block-manager			true
num_lookahead_slots	value	--num-lookahead-slots	int		0
seed	value	--seed	int		0
swap_space	value	--swap-space	float		4
cpu_offload_gb	value	--cpu-offload-gb	float		0
gpu_memory_utilization	value	--gpu-memory-utilization	float		0.9
num_gpu_blocks_override	value	--num-gpu-blocks-override	int		null
max_num_batched_tokens	value	--max-num-batched-tokens	int		null
max_num_seqs	value	--max-num-seqs	int		null
max_logprobs	value	--max-logprobs	int		20
disable_log_stats	true	--disable-log-stats			false
quantization	value	--quantization -q		aqlm,awq,deepspeedfp,tpu_int8,fp8,fbgemm_fp8,modelopt,marlin,gguf,gptq_marlin_24,gptq_marlin,awq_marlin,gptq,compressed-tensors,bitsandbytes,qqq,hqq,experts_int8,neuron_quant,ipex,None	null
rope_scaling	value	--rope-scaling			null
rope_theta	value	--rope-theta	float		null
hf_overrides	value	--hf-overrides			null
enforce_eager	true	--enforce-eager			false
max_seq_len_to_capture	value	--max-seq-len-to-capture	int		8192
disable_custom_all_reduce	true	--disable-custom-all-reduce			false
tokenizer_pool_size	value	--tokenizer-pool-size	int		0
tokenizer_pool_type	value	--tokenizer-pool-type			"ray"
tokenizer_pool_extra_config	value	--tokenizer-pool-extra-config			null
limit_mm_per_prompt	value	--limit-mm-per-prompt			null
mm_processor_kwargs	value	--mm-processor-kwargs			null
disable_mm_preprocessor_cache	true	--disable-mm-preprocessor-cache			false
enable_lora	true	--enable-lora			false
enable_lora_bias	true	--enable-lora-bias			false
max_loras	value	--max-loras	int		1
max_lora_rank	value	--max-lora-rank	int		16
lora_extra_vocab_size	value	--lora-extra-vocab-size	int		256
lora_dtype	value	--lora-dtype		auto,float16,bfloat16	"auto"
long_lora_scaling_factors	value	--long-lora-scaling-factors			null
max_cpu_loras	value	--max-cpu-loras	int		null
fully_sharded_loras	true	--fully-sharded-loras			false
enable_prompt_adapter	true	--enable-prompt-adapter			false
max_prompt_adapters	value	--max-prompt-adapters	int		1
max_prompt_adapter_token	value	--max-prompt-adapter-token	int		0
device	value	--device		auto,cuda,neuron,cpu,openvino,tpu,xpu,hpu	"auto"
num_scheduler_steps	value	--num-scheduler-steps	int		1
multi_step_stream_outputs	strbool	--multi-step-stream-outputs			true
scheduler_delay_factor	value	--scheduler-delay-factor	float		0.0
enable_chunked_prefill	strbool	--enable-chunked-prefill			null
speculative_model	value	--speculative-model			null
speculative_model_quantization	value	--speculative-model-quantization		aqlm,awq,deepspeedfp,tpu_int8,fp8,fbgemm_fp8,modelopt,marlin,gguf,gptq_marlin_24,gptq_marlin,awq_marlin,gptq,compressed-tensors,bitsandbytes,qqq,hqq,experts_int8,neuron_quant,ipex,None	null
num_speculative_tokens	value	--num-speculative-tokens	int		null
speculative_disable_mqa_scorer	true	--speculative-disable-mqa-scorer			false
speculative_draft_tensor_parallel_size	value	--speculative-draft-tensor-parallel-size -spec-draft-tp	int		null
speculative_max_model_len	value	--speculative-max-model-len	int		null
speculative_disable_by_batch_size	value	--speculative-disable-by-batch-size	int		null
ngram_prompt_lookup_max	value	--ngram-prompt-lookup-max	int		null
ngram_prompt_lookup_min	value	--ngram-prompt-lookup-min	int		null
spec_decoding_acceptance_method	value	--spec-decoding-acceptance-method		rejection_sampler,typical_acceptance_sampler	"rejection_sampler"
typical_acceptance_sampler_posterior_threshold	value	--typical-acceptance-sampler-posterior-threshold	float		null
typical_acceptance_sampler_posterior_alpha	value	--typical-acceptance-sampler-posterior-alpha	float		null
disable_logprobs_during_spec_decoding	strbool	--disable-logprobs-during-spec-decoding			null
model_loader_extra_config	value	--model-loader-extra-config			null
ignore_patterns	append	--ignore-patterns			[]
preemption_mode	value	--preemption-mode			null
served_model_name	+	--served-model-name			null
qlora_adapter_name_or_path	value	--qlora-adapter-name-or-path			null
otlp_traces_endpoint	value	--otlp-traces-endpoint			null
collect_detailed_traces	value	--collect-detailed-traces			null
disable_async_output_proc	true	--disable-async-output-proc			false
scheduling_policy	value	--scheduling-policy		fcfs,priority	"fcfs"
override_neuron_config	value	--override-neuron-config			null
override_pooler_config	value	--override-pooler-config			null
compilation_config	value	--compilation-config -O			null
kv_transfer_config	value	--kv-transfer-config			null
worker_cls	value	--worker-cls			"auto"
generation_config	value	--generation-config			null
disable_log_requests	true	--disable-log-requests			false
max_log_len	value	--max-log-len	int		null
disable_fastapi_docs	true	--disable-fastapi-docs			false
enable_prompt_tokens_details	true	--enable-prompt-tokens-details			false
"""
