"""Which server a lane measures, one class per runtime kind, chosen by `kind` in one place.

`embedded` (EmbeddedRuntime) serves the lane's model in satbench's process through xllamacpp,
`native` (NativeRuntime) starts the user's llama-server binary, `url` (UrlRuntime) measures a
running server satbench did not start. Every kind holds every field (the common base,
`RuntimeConfig`), in one order with one default each, so that run.json and results.json keep one
shape; what a kind means (does satbench start a server, which binary answers --version and
--help, which fields it needs or refuses) is its class's. `runtime_class(kind)` is the one choice
of class: `RuntimeConfig(kind=..., ...)` and validating a `RuntimeConfig` from a dict go through it,
so both give the kind's class; a dict without `kind` is an embedded runtime.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self, cast

from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    ValidationInfo,
    model_validator,
)

from satbench.config.ranges import Flag, Timeout
from satbench.config.strict import Strict

BUILTIN_MODEL = "builtin:gemma3-270m"
MODEL_DIR_ENV = "SATBENCH_MODEL_DIR"
DEFAULT_MODEL_DIR = os.path.join(".satbench", "models")

RuntimeKind = Literal["embedded", "native", "url"]
DEFAULT_KIND: RuntimeKind = "embedded"
REMOTE_OPTIONS = ("api_key_env", "api_key_file", "ca_cert", "insecure")


def resolve_model_dir(cli_value: str | None) -> str:
    """--model-dir, else $SATBENCH_MODEL_DIR, else .satbench/models under the working directory."""
    return cli_value or os.environ.get(MODEL_DIR_ENV) or DEFAULT_MODEL_DIR


class RuntimeConfig(Strict):
    """Which server satbench measures and how it gets one."""

    # (the docstring is the runtime's description in the published schemas.) The fields every kind
    # has; each kind's class (`runtime_class`) gives them their meaning. Constructing or validating
    # this base class gives an instance of the kind's class.

    kind: RuntimeKind = DEFAULT_KIND
    model: str | None = Field(BUILTIN_MODEL, description="GGUF path, builtin:NAME or synthetic:ARCH-SIZE; "
                              "None for url")
    model_dir: str = DEFAULT_MODEL_DIR
    server_bin: str | None = None
    url: str | None = None
    served_model: str | None = Field(None, min_length=1, description="url: the model id (one of /v1/models) "
                                     "requests name; None = the server's first listed model")
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    api_key_file: str | None = Field(None, description="file holding the API key (its path is recorded, "
                                     "never the key)")
    ca_cert: str | None = Field(None, description="PEM file of a CA or self-signed certificate trusted "
                                "besides the system's CAs")
    insecure: Flag = Field(False, description="TLS certificate verification turned OFF by the user")
    startup_timeout_s: Timeout = 180.0

    starts_server: ClassVar[bool] = True
    """satbench starts (and stops) the server: it reads the lane's model file on this machine, passes
    and checks the lane's server args and the environment the server inherits, and samples its process.
    False for a running server (url), whose model file and process are another's."""
    needs_binary: ClassVar[bool] = False
    """satbench starts the user's llama-server binary (`server_bin`), which answers --version and
    --help: its flags are checked against its --help."""
    engine_package: ClassVar[str | None] = None
    """The Python package that serves in satbench's process (embedded: xllamacpp): its version is the
    build, its parser checks the server args."""
    label: ClassVar[str] = "server"
    """What serves the lane, as a report's command line names it before the server's flags."""

    def __new__(cls, *args: Any, **data: Any) -> Self:
        if cls is RuntimeConfig:
            cls = cast(type[Self], class_of(data, cls))
        return super().__new__(cls)

    @model_validator(mode="wrap")
    @classmethod
    def _of_its_kind(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        """The base class validates a dict as its kind's class; a kind's class records its kind as set,
        so that a dump of the fields set (exclude_unset) validates again as the same kind."""
        if not isinstance(data, dict):
            return handler(data)
        if cls is RuntimeConfig and (chosen := class_of(data, cls)) is not cls:
            return cast(Self, chosen.model_validate(data, context=info.context))
        if cls is not RuntimeConfig and "kind" not in data:
            data = {"kind": cls.model_fields["kind"].default, **data}
        return handler(data)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        self._check()
        return self

    def _check(self) -> None:
        """ValueError for a field the kind needs and lacks, or has and refuses (a server satbench starts:
        no remote options, no served_model, a model)."""
        given = [k for k in REMOTE_OPTIONS if getattr(self, k)]
        if given:
            raise ValueError(f"{', '.join(given)}: only for a remote server (runtime 'url')")
        self._check_binary()
        if self.served_model is not None:
            raise ValueError("served_model: only for a remote server (runtime 'url'); a started server "
                             "serves its model")
        if not self.model:
            raise ValueError(f"runtime kind {self.kind!r} needs a model")

    def _check_binary(self) -> None:
        """ValueError when the kind needs a server binary and has none."""
        if self.needs_binary and not self.server_bin:
            raise ValueError(f"runtime kind {self.kind!r} needs server_bin")

    @property
    def binary(self) -> str | None:
        """The llama-server binary satbench starts (native), which answers --version and --help."""
        return self.server_bin if self.needs_binary else None

    @property
    def remote_url(self) -> str | None:
        """The URL of the running server measured (url), None for a server satbench starts."""
        return None


class EmbeddedRuntime(RuntimeConfig):
    """llama.cpp's server in satbench's own process, through xllamacpp (its flags: llama-server's)."""

    kind: Literal["embedded"] = "embedded"
    engine_package: ClassVar[str | None] = "xllamacpp"
    label: ClassVar[str] = "embedded (xllamacpp, llama-server's flags):"


class NativeRuntime(RuntimeConfig):
    """The user's llama-server binary (server_bin), started by satbench."""

    kind: Literal["native"] = "native"
    needs_binary: ClassVar[bool] = True
    label: ClassVar[str] = "llama-server"


class UrlRuntime(RuntimeConfig):
    """A running server at `url`, which satbench measures and does not start: its model is the
    server's, the key and TLS options are the client's."""

    kind: Literal["url"] = "url"
    starts_server: ClassVar[bool] = False
    label: ClassVar[str] = "running server"

    def _check(self) -> None:
        """A url; keys and TLS options consistent: the key has one source, TLS options an https:// url."""
        if not self.url:
            raise ValueError("runtime kind 'url' needs a url")
        if self.api_key_env and self.api_key_file:
            raise ValueError("api_key_env and api_key_file are mutually exclusive: give one")
        if self.ca_cert and self.insecure:
            raise ValueError("ca_cert and insecure contradict each other: give one")
        if (self.ca_cert or self.insecure) and not (self.url or "").lower().startswith("https://"):
            raise ValueError("ca_cert and insecure apply to an https:// url only")

    @property
    def remote_url(self) -> str | None:
        return self.url


RUNTIME_CLASSES: dict[str, type[RuntimeConfig]] = {
    "embedded": EmbeddedRuntime, "native": NativeRuntime, "url": UrlRuntime}


def class_of(data: Mapping[str, Any], base: type[RuntimeConfig] | None = None) -> type[RuntimeConfig]:
    """The class of the kind `data` names (none named: embedded); `base` (default RuntimeConfig) for a
    kind that is not one, which its own validation then refuses."""
    base = base or RuntimeConfig
    kind = data.get("kind", DEFAULT_KIND)
    return RUNTIME_CLASSES.get(kind, base) if isinstance(kind, str) else base


def runtime_class(kind: str) -> type[RuntimeConfig]:
    """The class of a runtime kind (KeyError for an unknown one): what the kind means, for a
    configuration and for a run's record of it alike."""
    return RUNTIME_CLASSES[kind]
