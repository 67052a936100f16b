"""Mock PD-disaggregated inference serving: gateway, prefill and decode roles that move real bytes.

One module per concern: `models` (model profiles and the pure compute model), `config` (frozen,
validated role settings), `openai_api` (request parsing, errors, response shapes), `textgen`
(prompt-token counting and seeded synthetic text), `vllm_metrics` (vLLM's names), `kvstore` and
`kvwire` (held KV buffers and the TCP pull protocol), `alltoall` (expert-parallel exchange),
`batching` (pure schedulers), `routing` (gateway policies), one module per role (`gateway`,
`prefill`, `decode`, `ep_worker`) and `cluster` (a local multi-process launcher).
"""
