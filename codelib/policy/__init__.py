"""The policy: a model that writes completions. Loading one (hub name, local directory, LoRA adapter; 4-bit;
`models`), the tiny model built from nothing (`tiny`), sampling (`generation`: our KV-cached loop, or vLLM through
`vllm_backend`), token log-probs for the trainers (`logprobs`), and several processes (`distributed`).

In: Tasks' prompts (codelib.tasks), checkpoints. Out: completions (text and token ids), log-probs, saved adapters.
"""
