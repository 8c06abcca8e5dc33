"""The engine: scheduler, KV cache, ORT executor, sampler and the step loop."""
