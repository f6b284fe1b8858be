"""Rollouts from an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, hosted APIs):
the sampler, its HTTP client, what the run records of the server, and the rollout cache.
"""
