"""More llama-server flags for a server satbench starts (`[lanes.server] args = [...]`).

The flags satbench sets itself (OWN_FLAGS: the slots, context, batches, threads, GPU layers, host,
port, model, endpoints, log verbosity) are refused here, named with satbench's own flag: their
values are what the figures are recorded with. So are the flags that reach outside the run
(REFUSED: they write files elsewhere, fetch or replace the model, lock satbench out, add endpoints
or run tools), for every runtime; a flag that reads a file (READS_FILE) needs a regular, readable
one, whose sha256 run.json records (`read_files`). The rest is checked before the run starts:
- a native `llama-server`: every flag must be one its own `--help` lists. The help also says what
  a flag takes: one whose value names a file, a directory or a URL (FNAME, FILE, PATH, DIR, URL, a
  repository) and that is not a READS_FILE flag is refused too, so a flag this list does not know
  yet cannot reach outside the run (`help_entries`). Aliases count as the flag: `--spec-draft-model`
  is `-md`. llama.cpp reads `_` as `-` in a `--` flag, and so does satbench (`--log_file`).
- the embedded runtime: every flag must be one of EMBEDDED, the llama-server flags that map onto
  xllamacpp's CommonParams, with a value it accepts (`apply_embedded` sets them in the child).
llama-server also reads its flags from the environment (LLAMA_ARG_*, LLAMA_API_KEY): a server
satbench starts is refused while such a variable is set (`check_environment`), since run.json would
not record it.
The flags go at the end of the server's command line (`llama_server_flags`), so run.json and
EVIDENCE.md record them with the rest, and a resume compares them like any other setting.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable
from typing import Any

from satbench.config.runtime import runtime_class
from satbench.errors import UserError

# llama-server flag → satbench's own (a lane file key, in brackets when there is no flag)
OWN_FLAGS: dict[str, str] = {
    **dict.fromkeys(("-m", "--model"), "--model"),
    **dict.fromkeys(("-np", "--parallel"), "--parallel"),
    **dict.fromkeys(("-c", "--ctx-size"), "--ctx-size"),
    **dict.fromkeys(("-b", "--batch-size"), "--batch-size"),
    **dict.fromkeys(("-ub", "--ubatch-size"), "--ubatch-size"),
    **dict.fromkeys(("-t", "--threads", "-tb", "--threads-batch"), "--threads"),
    **dict.fromkeys(("-ngl", "--gpu-layers", "--n-gpu-layers"), "--n-gpu-layers"),
    **dict.fromkeys(("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"), "--kv-unified"),
    **dict.fromkeys(("--host", "--port"), "--port (satbench binds 127.0.0.1)"),
    **dict.fromkeys(("--metrics", "--slots", "--no-slots", "--props"),
                    "(satbench turns these endpoints on)"),
    **dict.fromkeys(("-lv", "--verbosity", "--log-verbosity", "-v", "--verbose"),
                    "(satbench sets the log level)"),
    **dict.fromkeys(("-cb", "--cont-batching", "-nocb", "--no-cont-batching"),
                    "(continuous batching stays on)"),
}
# Flags that reach outside the run: refused for every runtime, with why (and satbench's own way where
# it has one). A flag that reads a file is allowed when its value is a regular, readable file, whose
# sha256 goes into run.json (`read_files`).
REFUSED: dict[str, str] = {
    **dict.fromkeys(("--log-file",), "writes a log outside the run directory (satbench keeps the server's "
                    "log in the run directory, server-LANE.log)"),
    **dict.fromkeys(("--slot-save-path", "-lcd", "--lookup-cache-dynamic"),
                    "writes files outside the run directory"),
    **dict.fromkeys(("-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hfv", "--hf-repo-v", "-hffv",
                     "--hf-file-v", "-hft", "--hf-token", "-mu", "--model-url", "-dr", "--docker-repo",
                     "-hfd", "-hfrd", "--hf-repo-draft"),
                    "fetches a model from the network, in place of the lane's: give a local file with "
                    "--model"),
    **dict.fromkeys(("--api-key", "--api-key-file"),
                    "would lock satbench out of the server it measures (measure a server that needs a key "
                    "with --url and --api-key-file)"),
    **dict.fromkeys(("--ssl-key-file", "--ssl-cert-file"),
                    "serves TLS on loopback, which the measurement does not need (measure a TLS server "
                    "with --url https://... and --ca-cert)"),
    **dict.fromkeys(("--path", "--api-prefix", "--rpc", "--reuse-port"),
                    "adds or moves network endpoints satbench does not drive"),
    **dict.fromkeys(("--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json"),
                    "runs tools or MCP servers for agents, which serving the lane does not need"),
    **dict.fromkeys(("--override-kv",), "changes the model's metadata: measure a model file that holds it"),
}
READS_FILE = frozenset((
    "--chat-template-file", "--lora", "--lora-scaled", "-md", "--model-draft", "--spec-draft-model", "-mm",
    "--mmproj", "-mv", "--model-vocoder", "--control-vector", "--control-vector-scaled", "-lcs",
    "--lookup-cache-static", "--grammar-file", "-f", "--file", "-jf", "--json-schema-file"))
# a --help value placeholder that names a file, a directory, a URL or a model repository
_OUTSIDE_VALUE = re.compile(r"FNAME|FILE|PATH|DIR|URL|<(?:user|repo|model)>")
REPEATABLE = frozenset(("--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled"))
NATIVE_VALUES = frozenset(("-ts", "--tensor-split", "-mg", "--main-gpu"))  # checked as for embedded
ENV_FLAG_PREFIX = "LLAMA_ARG_"  # llama-server reads LLAMA_ARG_<FLAG> as --flag
ENV_FLAGS = ("LLAMA_API_KEY",)  # and these, as the flags its --help names
MAX_READ_FILES = 16  # files the extra flags of one lane may read
TENSOR_SPLIT_DEVICES = 128  # llama.cpp's LLAMA_MAX_DEVICES: the length of CommonParams.tensor_split
MAX_SPLIT_PROPORTION = 1e6  # one device's share of a tensor split (llama.cpp divides by their sum)

_FLAG = re.compile(r"^--?[A-Za-z][A-Za-z0-9_-]*$")
_HELP_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9-]*)")
# a --help entry: its flags (comma-separated), then the value it takes, if any, up to two spaces or the end
_HELP_ENTRY = re.compile(r"^\s*((?:--?[A-Za-z][\w-]*,\s*)*--?[A-Za-z][\w-]*)(?: (.+?))?(?:\s{2,}|\s*$)")
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def split_flags(args: list[str]) -> list[tuple[str, list[str]]]:
    """[(flag, its values)]: a flag is a word that starts with - (not a number); what follows it up to
    the next flag is its values. A value before any flag is a UserError."""
    out: list[tuple[str, list[str]]] = []
    for word in args:
        if _FLAG.match(word.split("=", 1)[0]):
            flag, eq, value = word.partition("=")
            if flag.startswith("--"):
                flag = flag.replace("_", "-")  # as llama.cpp reads it: --log_file is --log-file
            out.append((flag, [value] if eq else []))
        elif not out:
            raise UserError(f"server args {args!r}: {word!r} comes before any flag")
        else:
            out[-1][1].append(word)
    return out


def _own(flag: str) -> None:
    """A flag satbench sets itself, or one the policy refuses (REFUSED): UserError naming why."""
    if flag in OWN_FLAGS:  # a flag of satbench's to use instead, or (in brackets) why none is needed
        own = OWN_FLAGS[flag]
        raise UserError(f"server args: {flag} is set by satbench: "
                        + (own[1:-1] if own.startswith("(") else f"use {own}"))
    if flag in REFUSED:
        raise UserError(f"server args: {flag} {REFUSED[flag]}")


def read_files(args: list[str]) -> dict[str, str]:
    """The files the flags read (READS_FILE) → their sha256: each must be a regular, readable file
    (UserError otherwise; a FIFO or device is refused before it is opened), recorded so that the
    evidence says what the server read beside the model."""
    out: dict[str, str] = {}
    for flag, values in split_flags(args):
        if flag not in READS_FILE:
            continue
        if not values:
            raise UserError(f"server args: {flag} needs a file")
        path = values[0]
        if len(out) >= MAX_READ_FILES:
            raise UserError(f"server args: more than {MAX_READ_FILES} files to read")
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise UserError(f"server args: {flag} {path}: not a regular file")
            digest = hashlib.sha256()
            with open(path, "rb", buffering=0) as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # replaced since: refused too
                    raise UserError(f"server args: {flag} {path}: not a regular file")
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        except OSError as exc:
            raise UserError(f"server args: {flag} {path}: {exc.strerror or exc}") from None
        out[path] = digest.hexdigest()
    return out


def help_flags(help_text: str) -> set[str]:
    """The flags a `llama-server --help` lists (every -x / --xyz word in it)."""
    return set(_HELP_FLAG.findall(help_text))


def help_entries(help_text: str) -> dict[str, tuple[frozenset[str], str]]:
    """Each flag of a `llama-server --help` entry line → (the entry's flags: its aliases, the value it
    takes as the help writes it, "" for none): `-m,    --model FNAME   model path to load`."""
    out: dict[str, tuple[frozenset[str], str]] = {}
    for line in help_text.splitlines():
        if (m := _HELP_ENTRY.match(line)) is None:
            continue
        aliases = frozenset(f.strip() for f in m.group(1).split(","))
        for flag in aliases:
            out.setdefault(flag, (aliases, m.group(2) or ""))
    return out


def check_environment(environ: dict[str, str] | None = None) -> None:
    """UserError when the environment a started server inherits sets one of its flags (LLAMA_ARG_*,
    LLAMA_API_KEY): run.json would not record it."""
    env = os.environ if environ is None else environ
    found = sorted(k for k in env if k.startswith(ENV_FLAG_PREFIX) or k in ENV_FLAGS)
    if found:
        raise UserError(f"the environment sets {', '.join(found)}, which llama-server reads as its flags; "
                        "unset them (give llama-server flags with --server-arg, where satbench checks and "
                        "records them)")


def check_lane_args(kind: str, args: list[str], server_bin: str | None) -> None:
    """The lane's extra args, and the environment its server would inherit, checked for its runtime
    (module docstring): a server satbench starts inherits the environment; its binary's --help, else
    its engine's parser, checks the args; a running server takes none."""
    runtime = runtime_class(kind)
    if runtime.starts_server:
        check_environment()
    if not args:
        return
    if runtime.engine_package is not None:
        parse_embedded(args)
    elif runtime.needs_binary and server_bin:
        from satbench.server.native import capped_output

        check_native(args, capped_output([server_bin, "--help"], timeout_s=20), server_bin)
    else:
        raise UserError("server args: a url lane measures a running server, which satbench does not start")


def check_native(args: list[str], help_text: str | None, server_bin: str) -> None:
    """UserError for a flag satbench sets, or one `server_bin --help` does not list."""
    if help_text is None:
        raise UserError(f"server args: cannot read {server_bin} --help to check them against")
    known, entries = help_flags(help_text), help_entries(help_text)
    given: dict[frozenset[str], str] = {}
    for flag, values in split_flags(args):
        aliases, takes = entries.get(flag, (frozenset((flag,)), ""))
        if aliases in given and flag not in REPEATABLE:
            raise UserError(f"server args: {flag} is given twice ({given[aliases]} and {flag}); give it once")
        given[aliases] = flag
        if flag in NATIVE_VALUES:  # a number llama-server would take as it comes: the embedded ranges
            _value(flag, values, EMBEDDED[flag][1])
        for alias in sorted(aliases, key=lambda a: a != flag):  # the flag as given first, then its aliases
            _own(alias)
        if flag not in known:
            raise UserError(f"server args: {flag} is not a flag of {server_bin} (its --help does not "
                            "list it)")
        if flag not in READS_FILE and (read := sorted(aliases & READS_FILE)):
            raise UserError(f"server args: {flag} reads a file: give it as {read[0]}, whose file satbench "
                            "hashes into run.json")
        if flag not in READS_FILE and _OUTSIDE_VALUE.search(takes):
            raise UserError(f"server args: {flag} {takes} reaches a file, directory or URL outside the run "
                            "that satbench does not record; the flags that read a file it hashes are "
                            + ", ".join(sorted(f for f in READS_FILE if f.startswith("--"))))
    read_files(args)


def _choice(values: dict[str, str]) -> Callable[[list[str]], str]:
    def parse(v: list[str]) -> str:
        if len(v) != 1 or v[0].lower() not in values:
            raise ValueError(f"expected one of {', '.join(values)}")
        return values[v[0].lower()]
    return parse


def _int(v: list[str]) -> int:
    if len(v) != 1 or not re.fullmatch(r"[0-9]{1,4}", v[0]):
        raise ValueError("expected an integer")
    return int(v[0])


def _device(v: list[str]) -> int:
    """A device index: below llama.cpp's LLAMA_MAX_DEVICES (whether the machine has it is the server's
    to say at start)."""
    n = _int(v)
    if n >= TENSOR_SPLIT_DEVICES:
        raise ValueError(f"expected a device index from 0 to {TENSOR_SPLIT_DEVICES - 1}")
    return n


def _floats(v: list[str]) -> list[float]:
    """Tensor-split proportions: finite, from 0 to MAX_SPLIT_PROPORTION each, not all 0, at most one
    per device."""
    parts = v[0].replace("/", ",").split(",") if len(v) == 1 else []
    try:
        out = [float(p) for p in parts if re.fullmatch(r"[0-9.eE+-]+", p)]  # ASCII, no nan, inf or _
    except ValueError:
        out = []
    if (not out or len(out) != len(parts) or len(out) > TENSOR_SPLIT_DEVICES or sum(out) <= 0
            or not all(0 <= x <= MAX_SPLIT_PROPORTION for x in out)):  # nan fails every comparison
        raise ValueError(f"expected proportions like 3,1 (each from 0 to {MAX_SPLIT_PROPORTION:g}, "
                         f"not all 0, at most {TENSOR_SPLIT_DEVICES})")
    return out


def _fraction(v: list[str]) -> float:
    """A fraction from 0 to 1 (llama.cpp's --slot-prompt-similarity)."""
    if len(v) != 1 or not re.fullmatch(r"(0(\.[0-9]{1,6})?|1(\.0{1,6})?|\.[0-9]{1,6})", v[0]):
        raise ValueError("expected a fraction from 0 to 1")
    return float(v[0])


def _mib_value(v: list[str]) -> int:
    """MiB, or -1 for no limit (llama.cpp's --cache-ram)."""
    if len(v) != 1 or not re.fullmatch(r"(-1|[0-9]{1,7})", v[0]):
        raise ValueError("expected MiB (0 turns it off, -1 means no limit)")
    return int(v[0])


def _none(v: list[str]) -> bool:
    if v:
        raise ValueError("takes no value")
    return True


# llama-server flag → (CommonParams attribute path, value parser, how the value is set)
_FA = {"on": "LLAMA_FLASH_ATTN_TYPE_ENABLED", "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED",
       "auto": "LLAMA_FLASH_ATTN_TYPE_AUTO"}
_SM = {"none": "LLAMA_SPLIT_MODE_NONE", "layer": "LLAMA_SPLIT_MODE_LAYER", "row": "LLAMA_SPLIT_MODE_ROW"}
_CT = {t: f"GGML_TYPE_{t.upper()}" for t in CACHE_TYPES}
EMBEDDED: dict[str, tuple[str, Callable[[list[str]], Any], str]] = {
    **dict.fromkeys(("-fa", "--flash-attn"), ("flash_attn_type", _choice(_FA), "llama_flash_attn_type")),
    **dict.fromkeys(("-ctk", "--cache-type-k"), ("cache_type_k", _choice(_CT), "ggml_type")),
    **dict.fromkeys(("-ctv", "--cache-type-v"), ("cache_type_v", _choice(_CT), "ggml_type")),
    **dict.fromkeys(("-sm", "--split-mode"), ("split_mode", _choice(_SM), "llama_split_mode")),
    **dict.fromkeys(("-ts", "--tensor-split"), ("tensor_split", _floats, "list")),
    **dict.fromkeys(("-mg", "--main-gpu"), ("main_gpu", _device, "value")),
    **dict.fromkeys(("-nkvo", "--no-kv-offload"), ("no_kv_offload", _none, "value")),
    **dict.fromkeys(("--no-warmup",), ("warmup", lambda v: not _none(v), "value")),
    **dict.fromkeys(("--swa-full",), ("swa_full", _none, "value")),
    **dict.fromkeys(("-sps", "--slot-prompt-similarity"), ("slot_prompt_similarity", _fraction, "value")),
    **dict.fromkeys(("--cache-reuse",), ("n_cache_reuse", _int, "value")),
    **dict.fromkeys(("-cram", "--cache-ram"), ("cache_ram_mib", _mib_value, "value")),
    **dict.fromkeys(("--ctx-checkpoints", "--swa-checkpoints"), ("n_ctx_checkpoints", _int, "value")),
}


def parse_embedded(args: list[str]) -> list[tuple[str, Any, str]]:
    """[(attribute, value, how)] for `apply_embedded`; UserError for a flag satbench sets, one xllamacpp
    has no parameter for, or a value it does not accept."""
    out: list[tuple[str, Any, str]] = []
    given: dict[str, str] = {}
    for flag, values in split_flags(args):
        _own(flag)
        if flag not in EMBEDDED:
            shown = ", ".join(sorted({f for f in EMBEDDED if f.startswith("--")}))
            raise UserError(f"server args: {flag} has no xllamacpp parameter the embedded runtime can set "
                            f"(it takes {shown}); give --server-bin for a llama-server that does")
        attr, parse, how = EMBEDDED[flag]
        if attr in given:
            raise UserError(f"server args: {flag} is given twice ({given[attr]} and {flag}); give it once")
        given[attr] = flag
        out.append((attr, _value(flag, values, parse), how))
    return out


def _value(flag: str, values: list[str], parse: Callable[[list[str]], Any]) -> Any:
    """`parse(values)`, a ValueError as the UserError naming the flag and its value."""
    try:
        return parse(values)
    except ValueError as exc:
        raise UserError(f"server args: {flag} {' '.join(values)}: {exc}") from None


def apply_embedded(params: Any, args: list[str]) -> None:
    """Set `args` on xllamacpp's CommonParams `params` (in the embedded server's child process)."""
    import xllamacpp

    for attr, value, how in parse_embedded(args):
        if how == "list":  # llama.cpp's fixed array, one proportion per device
            setattr(params, attr, value + [0.0] * (TENSOR_SPLIT_DEVICES - len(value)))
        elif how == "value":
            setattr(params, attr, value)
        else:
            setattr(params, attr, getattr(getattr(xllamacpp, how), value))
