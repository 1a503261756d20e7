"""kvstash KV connector for vLLM 0.32 (placeholder until connector module lands)."""
