"""Shared by the capacity tests (a uniquely named module: ``from conftest import`` is ambiguous
when several test folders are collected together)."""

SPEC = {
    "name": "tiny-capacity", "seed": 5, "block_size": 16, "vocab_size": 32000, "sessions": 24,
    "shared_prefix": {"system_prompt_tokens": 400, "tool_schema_tokens": 200},
    "session": {
        "task_tokens": {"kind": "lognormal", "median": 600, "sigma": 0.5, "min": 50, "max": 3000},
        "turns": {"kind": "uniform", "low": 4, "high": 8},
        "output_tokens": {"kind": "lognormal", "median": 60, "sigma": 0.5, "min": 4, "max": 300},
        "tool_result_tokens": {"kind": "lognormal", "median": 200, "sigma": 0.7, "min": 10, "max": 1500},
        "think_s": {"kind": "lognormal", "median": 0.5, "sigma": 0.5, "min": 0.05, "max": 5},
        "max_context_tokens": 8000,
    },
}

SMALL = ["engine.model=meta-llama/Llama-3.1-8B-Instruct", "engine.model_profile=llama-3.1-8b",
         "engine.tensor_parallel_size=1", "engine.data_parallel_size=1", "engine.enable_expert_parallel=false",
         "engine.max_num_seqs=64", "engine.max_num_batched_tokens=2048", "hardware.gpu=h100-sxm",
         "hardware.gpu_count=1", "load.warmup_s=2", "load.duration_s=20", "load.drain_s=60",
         "load.min_requests=5", "load.clock=virtual", "baselines.published=[]"]
