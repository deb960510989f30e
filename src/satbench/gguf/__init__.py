"""Model files: GGUF reading and hashing (`files`), what a file's header says it is (`header`:
architecture, parameters, file type, ...; `architectures`: the architectures' usual names), the
built-in Gemma 3 270M, the SYNTHETIC random-weight GGUF writers (llama, qwen3moe, deepseek2,
deepseek4) and resolving a lane's model."""
