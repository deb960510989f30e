"""general.architecture → how people name it, for the reports. The key itself is what satbench
records and compares; an architecture missing here is shown as its key alone. No heavy import: the
capability checks and the reports read it."""

from __future__ import annotations

ARCHITECTURE_LABELS = {
    "deepseek4": "DeepSeek V4",
    "deepseek2": "DeepSeek V2/V3",
    "deepseek": "DeepSeek MoE (V1)",
    "qwen3moe": "Qwen3 MoE",
    "qwen3": "Qwen3",
    "qwen2moe": "Qwen2 MoE",
    "qwen2": "Qwen2",
    "llama": "Llama",
    "llama4": "Llama 4",
    "gemma3": "Gemma 3",
    "gemma2": "Gemma 2",
    "gemma": "Gemma",
    "phi3": "Phi-3",
    "glm4moe": "GLM-4 MoE",
}


def architecture_label(architecture: str | None) -> str | None:
    """A human name for a general.architecture key (None when satbench knows none)."""
    return None if architecture is None else ARCHITECTURE_LABELS.get(architecture)


def described_architecture(architecture: str | None, unknown: str = "not recorded") -> str:
    """"deepseek4 (DeepSeek V4)": the key with its human name where satbench knows one; `unknown`
    when there is no key."""
    if architecture is None:
        return unknown
    label = architecture_label(architecture)
    return f"{architecture} ({label})" if label and label.lower() != architecture.lower() else architecture
