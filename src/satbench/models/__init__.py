"""Model files: GGUF reading and hashing (`files`), the built-in Gemma 3 270M, the SYNTHETIC
random-weight GGUF writers (llama, qwen3moe, deepseek2, deepseek4) and resolving a lane's model."""
