"""Checks of a command's options answered before any heavy import (torch, transformers): a current directory that no
longer exists (`check_current_directory`: no relative path can be read from it, and torch's math library aborts its
import there), an input path that does not exist (every option whose field declares `reads="path"`,
`runtime.options.reading_options`), an input whose format is not the one the command reads (the head of each file
read by the command's own reader, `retromae.data.inputs`), a model option (`reads="model"` or `"tokenizer"`:
--model, --teacher, --tokenizer) that names no model folder, and a hub name when the Hugging Face hub cannot be
reached and the model is not cached. The same checks run on options from the command line, a `--config` file and
the Python API (`check_config`, which `retromae.api` runs on every call).

Owns `check_arguments(args, options_class)`, which `retromae.cli` runs after parsing and before the command's module
does any work (paths only, no network), `configured(cls, args)`, with which every command builds its options and
then checks them (`check_config`: after the options, so that a bad option is named first), the hub's reachability
(`hub_unreachable`: one TCP connection to the hub's endpoint or proxy, bounded by `PROBE_SECONDS`, DNS included), the
one reader of $HF_ENDPOINT and the proxy variables (`URL_VARIABLES`, `url_variable`: a malformed URL refused in one
line, by every command before any work, `check_network_settings`, with the path variables and the cache a command
writes in: `check_settings`, `writes_cache`), and whether a hub model is in the local cache
(`cached_on_disk`, read from the cache's folders without importing huggingface_hub). With no network, a cached model
runs with `HF_HUB_OFFLINE=1` set for the process, so the loaders read the cache at once instead of retrying the hub
for half a minute; an uncached one is refused in one line that says the hub was unreachable; with `HF_HUB_OFFLINE`
set, the hub is not tried at all.
Does not own what a folder holds (`retromae.models.model_source.resolve_model`, which this calls) nor loading a model.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import re
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from retromae.data.held_out import check_held_out
from retromae.data.inputs import check_format, declared_formats
from retromae.models.encoder_config import BACKENDS
from retromae.models.model_source import (
    ANY_SIDE,
    ModelSource,
    looks_local,
    ours_to_write,
    resolve_model,
    resolve_tokenizer,
)
from retromae.runtime.errors import UNSHOWABLE, ConfigError, DataError, FileSystemError, ModelLoadError
from retromae.runtime.io import check_cache_setting, path_variable
from retromae.runtime.lines import quoted
from retromae.runtime.options import MODEL_READS, build_config, reading_options

T = TypeVar("T")

PROBE_SECONDS = 3.0
HUB = ("huggingface.co", 443)
OFFLINE_VALUES = ("1", "on", "yes", "true")
# The proxy the hub's client (httpx, as urllib reads the environment) goes through to an https:// endpoint, the first
# set: a lowercase name wins
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
# Every URL the clients read from the environment (huggingface_hub's httpx and requests): each proxy is parsed when a
# client is made, whatever the request, so a malformed http_proxy fails a download from an https:// hub.
# NO_PROXY is not one: a comma list of hosts the proxies do not apply to (`no_proxy`)
URL_VARIABLES = ("HF_ENDPOINT", *PROXY_VARIABLES, "http_proxy", "HTTP_PROXY")
# The schemes httpx and requests take for a proxy, with the port each means when a URL leaves it out; the hub's
# endpoint is http or https
SCHEME_PORTS = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080}
# An entry of NO_PROXY the clients read (but an IP address or network, or a URL): a host or a domain, `.` or `*.`
# before it for its subdomains only, a port after it
NO_PROXY_HOST = re.compile(r"(\*?\.)?[\w-]+(\.[\w-]+)*(:[0-9]{1,5})?", re.ASCII)


def check_arguments(args: argparse.Namespace, options_class: type | None) -> None:
    """DataError for an input option of `options_class` naming a path that does not exist; ModelLoadError for a model
    option that names a missing or non-model folder (a hub name is left to `configured`)."""
    check_paths(args, options_class)
    for option, kind in reading_options(options_class, MODEL_READS).items():
        for name in _values(getattr(args, option, None)):
            if looks_local(os.path.expanduser(name)):
                resolver(kind)(name, f"--{option.replace('_', '-')}", ANY_SIDE)


def check_paths(options: object, options_class: type | None = None) -> None:
    """DataError for an input option (`reads="path"`) of `options` (parsed arguments of `options_class`, or a config)
    naming a path that does not exist (`hf:NAME` aside), after `check_current_directory`."""
    check_current_directory()
    for option in reading_options(options_class or type(options), ("path",)):
        for path in _values(getattr(options, option, None)):
            if not path.startswith("hf:") and not os.path.exists(os.path.expanduser(path)):
                raise DataError(f"--{option.replace('_', '-')} {path}: no such file or folder")


def check_current_directory() -> None:
    """FileSystemError when the current directory no longer exists (deleted or moved away while the shell stayed in
    it): every relative path would resolve against nothing (`os.path.abspath`: a bare "No such file or directory"),
    and importing torch aborts there (oneMKL: "Cannot load libtorch_cpu.so"). Named by $PWD when the shell set it."""
    try:
        os.getcwd()
    except FileNotFoundError:
        shown = f" ({os.environ['PWD']})" if os.environ.get("PWD") else ""
        raise FileSystemError(f"the current directory{shown} no longer exists (deleted or moved away): relative "
                              "paths cannot be read from it, and torch cannot load there; cd to a folder that exists "
                              "(and give paths from it, or absolute ones)") from None


def configured(config_cls: type[T], args: argparse.Namespace) -> T:
    """The command's options (`retromae.runtime.options.build_config`: a missing or invalid option named first), then
    checked by `check_config`: all before the command imports torch."""
    return check_config(build_config(config_cls, args))


def check_config(config: T) -> T:
    """`config` once its inputs exist and their heads are of the formats its command reads (`check_inputs`) and each
    model it names is a model folder or a reachable (or cached) hub name (`check_model`): the one check before the
    work of the command line, a `--config` file and the Python API alike; then a held-out set against what the
    command trains on (`data.held_out.check_held_out`). The environment's settings are checked first
    (`check_settings`, told whether the command `writes_cache`): a command would claim its output before its first
    use of the cache."""
    check_settings(writes_cache(config))
    check_inputs(config)
    for option, kind in reading_options(config, MODEL_READS).items():
        for name in _values(getattr(config, option, None)):
            check_model(name, f"--{option.replace('_', '-')}", resolver(kind))
    check_held_out(config)  # what a command holds out is not what it trains on, said before torch
    return config


def writes_cache(config: object) -> bool:
    """Whether the command `config` configures makes files in the cache folder (`runtime.io.cache_folder`): a token
    store (`makes_token_store`: pretrain, adapt) with no --cache-dir, or an export for a backend other than torch
    (`inference_of`) of a model (one of several) whose folder is not ours to write
    (`models.model_source.ours_to_write`: a hub name, an installed package's folder; `models.backends.export_root`
    keeps it beside the model otherwise)."""
    token_store = getattr(config, "makes_token_store", lambda: False)() and not getattr(config, "cache_dir", None)
    backend, models = inference_of(config)
    exports = backend not in (None, "torch") and any(
        not (looks_local(os.path.expanduser(name)) and ours_to_write(resolve_model(name, side=ANY_SIDE).transformer))
        for name in models)
    return token_store or exports


def inference_of(config: object) -> tuple[str | None, list[str]]:
    """The backend and the models the command `config` configures encodes with: its --backend and --model, and, for
    a command that takes what is not given from a record (`recorded_encoder`: `search`, the documents' encoder in
    index.json), the record's: a backend of `BACKENDS`, a model that is a hub name or on disk (a moved one is named,
    with its record, by the loader)."""
    recorded = getattr(config, "recorded_encoder", dict)()
    backend = getattr(config, "backend", None) or (recorded.get("backend") if recorded.get("backend") in BACKENDS
                                                   else None)
    model = recorded.get("model")
    kept = isinstance(model, str) and (os.path.exists(os.path.expanduser(model)) or not looks_local(model))
    return backend, _values(getattr(config, "model", None)) or ([model] if kept else [])


def check_inputs(config: object) -> None:
    """Every input option of `config` names an existing path (`check_paths`), read as far as its head in the format
    its command declares for it (`INPUT_FORMATS`, `retromae.data.inputs.check_format`)."""
    check_paths(config)
    for option, (kind, split) in declared_formats(type(config)).items():
        value = getattr(config, option, None)
        if _values(value):
            check_format(kind, value, getattr(config, split) if split else "test",
                         getattr(config, "qrels_format", "auto"))


def resolver(kind: str) -> Callable[[str, str, str], ModelSource]:
    """What reads a model option's folder, by what it reads: a tokenizer may be a folder holding a tokenizer alone."""
    return resolve_tokenizer if kind == "tokenizer" else resolve_model


def _values(value: object) -> list[str]:
    """An option's value as the non-empty paths or names it gives (a list option gives several)."""
    return [str(item) for item in (value if isinstance(value, list) else [value])
            if isinstance(item, (str, os.PathLike)) and str(item)]


def check_model(name: str, option: str = "--model",
                resolve: Callable[[str, str, str], ModelSource] = resolve_model) -> None:
    """A local path must be a model folder (`resolve`, `resolve_model` by default, says what it holds otherwise); a
    hub name must be cached or the hub reachable: with no network, a cached model switches the process to offline
    mode."""
    source = resolve(name, option, ANY_SIDE)
    if source.kind != "hub":
        return
    if offline():
        if not cached_on_disk(source.folder):
            raise ModelLoadError(f"{option} {name}: not in the local Hugging Face cache ({hub_cache()}), and "
                                 "HF_HUB_OFFLINE is set, so the hub was not asked; pass a local model folder, or "
                                 "unset HF_HUB_OFFLINE to download it")
        return
    reason = hub_unreachable()
    if reason is None:
        return
    if cached_on_disk(source.folder):
        go_offline()
        return
    raise ModelLoadError(f"{option} {name}: the Hugging Face hub is unreachable ({reason}) and the model is not in "
                         f"the local cache ({hub_cache()}); pass a local model folder, or run where the hub can be "
                         "reached to download it")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in OFFLINE_VALUES


def go_offline() -> None:
    """Offline mode for the rest of the process: the environment for libraries not imported yet, and
    huggingface_hub's constant when it already is."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


def hub_cache() -> Path:
    """The folder huggingface_hub caches models in: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
    ($XDG_CACHE_HOME in place of ~/.cache when set)."""
    if (hub := path_variable("HF_HUB_CACHE")) is not None:
        return hub.expanduser()
    cache_home = (path_variable("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return (path_variable("HF_HOME") or cache_home / "huggingface").expanduser() / "hub"


def cached_on_disk(repo: str) -> bool:
    """Whether some snapshot of hub model `repo` in the cache holds its config.json."""
    snapshots = hub_cache() / f"models--{repo.replace('/', '--')}" / "snapshots"
    return any(snapshots.glob("*/config.json"))


def url_variable(name: str) -> tuple[str, int] | None:
    """(host, port) of the URL the environment variable `name` holds, None when it is unset or empty: one without a
    scheme (`proxy:3128`) read as http://, as httpx reads a proxy variable, and a port left out its scheme's
    (`SCHEME_PORTS`). ConfigError naming the variable and its value when the URL's scheme is none the clients take
    (a proxy's `SCHEME_PORTS`, the endpoint's http or https), it names no host, its port is no number from 1 to 65535,
    an IPv6 address lacks a bracket (urlsplit's ValueError ended the hub probe in a traceback), or it holds white space
    or a control character (`a b`: a host no client looks up). The one reader of the hub's address and proxies
    (`hub_endpoint`, `hub_unreachable`)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    schemes = ("http", "https") if name == "HF_ENDPOINT" else tuple(SCHEME_PORTS)
    try:
        parts = urlsplit(value if "://" in value else f"http://{value}")
        host, port = parts.hostname, parts.port
    except ValueError:  # a port beyond 65535 or no number; a '[' without its ']'
        host = port = None
    if not host or port == 0 or any(c.isspace() for c in value) or UNSHOWABLE.search(value):
        raise ConfigError(f"{name}={quoted(value)}: not a URL with a host and a port from 1 to 65535 "
                          "(http://HOST:PORT); fix or unset it")
    if parts.scheme not in schemes:
        raise ConfigError(f"{name}={quoted(value)}: its scheme {quoted(parts.scheme)} is none the clients take "
                          f"({', '.join(schemes)}); fix or unset it")
    return host, port or SCHEME_PORTS[parts.scheme]


def no_proxy() -> list[str]:
    """The entries of $no_proxy, else $NO_PROXY (a lowercase name wins, even empty, as urllib reads them for the hub's
    client): the hosts the proxies do not apply to (`bypasses_proxy`). ConfigError naming the variable for an entry
    that names no host (`a b`, `[::1`, `http://[`, `host/path`), which the client drops or matches with no host,
    without a word, so that the proxy would be used for the host it meant."""
    name = "no_proxy" if "no_proxy" in os.environ else "NO_PROXY"
    entries = [entry.strip() for entry in os.environ.get(name, "").split(",") if entry.strip()]
    for entry in entries:
        if _no_proxy_host(entry) is None:
            raise ConfigError(f"{name}={quoted(os.environ[name])}: {quoted(entry)} names no host (HOST, .DOMAIN, "
                              "*.DOMAIN, an IP address or network, a URL, or *), so the proxies would be used for the "
                              "one meant; fix or unset it")
    return entries


def bypasses_proxy(host: str, port: int | None = None) -> bool:
    """Whether `no_proxy` exempts `host` (the hub's, at the `port` its URL names, if it names one) from the proxies,
    as the hub's client (httpx) matches its entries: `*` every host; `DOMAIN` that host and its subdomains, `.DOMAIN`
    and `*.DOMAIN` its subdomains only; an IP address or network the addresses in it; `HOST:PORT` only a URL naming
    that port; a URL its host for https (`http://HOST` exempts only http requests)."""
    host = host.lower()
    entries = [entry for entry in no_proxy() if ("://" not in entry or entry.startswith(("https://", "all://")))
               and (port is not None and entry.endswith(f":{port}") or not re.search(r":[0-9]+$", entry))]
    for pattern in map(_no_proxy_host, entries):
        if isinstance(pattern, str):
            domain = pattern.split(".", 1)[1] if pattern.startswith((".", "*.")) else None
            if pattern == "*" or host.endswith(f".{domain or pattern}") or host == pattern and domain is None:
                return True
        else:
            with contextlib.suppress(ValueError):
                if ipaddress.ip_address(host.strip("[]")) in pattern:
                    return True
    return False


def _no_proxy_host(entry: str) -> str | ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """What one entry of NO_PROXY names: `*`, a host pattern without its port (`.example.com`), an IP network (an
    address is one of one), or None when the clients cannot read it."""
    if entry == "*":
        return entry
    if "://" in entry:
        try:
            host = urlsplit(entry).hostname
        except ValueError:
            return None
        return _no_proxy_host(host) if host and "://" not in host else None
    with contextlib.suppress(ValueError):
        return ipaddress.ip_network(entry.strip("[]") if entry.startswith("[") and entry.endswith("]") else entry,
                                    strict=False)
    return entry.rsplit(":", 1)[0].lower() if NO_PROXY_HOST.fullmatch(entry) else None


def check_settings(writes: bool = False) -> None:
    """The environment's settings, before any work: its path variables and the cache, which a command that `writes`
    in must take a new file (`runtime.io.check_cache_setting`), then the hub's URL variables
    (`check_network_settings`). Asked by `retromae.cli` before the command's options, and by `check_config`."""
    check_cache_setting(writes)
    check_network_settings()


def check_network_settings() -> None:
    """ConfigError for a malformed URL in any of `URL_VARIABLES` (`url_variable`): asked by `retromae.cli` before any
    work, whatever the command (importing huggingface_hub, which every command does, fails on an $HF_ENDPOINT it
    cannot split), and by `check_config` for the Python API."""
    for name in URL_VARIABLES:
        url_variable(name)
    no_proxy()


def hub_endpoint() -> tuple[str, int]:
    """(host, port) of the hub: $HF_ENDPOINT (`url_variable`) or huggingface.co:443."""
    return url_variable("HF_ENDPOINT") or HUB


def hub_unreachable(seconds: float = PROBE_SECONDS) -> str | None:
    """None when a TCP connection to the hub (or to the proxy its client goes through, the first of `PROXY_VARIABLES`
    set, unless NO_PROXY exempts the hub: `bypasses_proxy`) opens within `seconds`; otherwise why not, in a few
    words. Runs in a thread, so that a name lookup that hangs is bounded too. $HF_ENDPOINT, each proxy variable
    (`url_variable`) and NO_PROXY are read, whichever is used."""
    endpoint = hub_endpoint()
    proxies = [url_variable(name) for name in PROXY_VARIABLES]
    proxy = next((proxy for proxy in proxies if proxy is not None), None)
    named_port = urlsplit(os.environ.get("HF_ENDPOINT", "").strip()).port if endpoint != HUB else None
    host, port = endpoint if proxy is None or bypasses_proxy(endpoint[0], named_port) else proxy
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=seconds).close()
            outcome.append(None)
        except OSError as error:
            outcome.append(f"{host}:{port}: {error.strerror or error}")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else f"{host}:{port}: no answer within {seconds:g} s"
