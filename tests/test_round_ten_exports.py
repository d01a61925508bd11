"""Round ten: an export in a cache that takes no file (`runtime.cache_entries`, `runtime.io.check_writable`), and
the OS errors of the API's entry points (`runtime.io.named_os_errors`).

A cache shared read-only that holds the export of a model's weights serves it, through every path that exports; one
that must be written and cannot be is refused in one line naming the folder and the cache's setting, the words of
the preflight's refusal, as a FileSystemError: nothing written in it, no output left.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import command_inputs, error_line, quick_onnx_export

import retromae
from retromae.cli import main
from retromae.models import backends
from retromae.models.backends import EXPORT_FILES
from retromae.models.encoder import Encoder
from retromae.retrieval.searcher import Searcher
from retromae.runtime.errors import FileSystemError, ModelLoadError
from retromae.runtime.run_folder import quiet_entry_point

sys.path.insert(0, str(Path(__file__).parent))
from test_os_failures import read_only, tmpfs  # noqa: E402, F401  (read_only: a fixture)
from test_round_ten_claims import recording  # noqa: E402

TEXTS = ["a cat sat", "the dog ran far"]


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """command_inputs, the model folder holding files by the exports' names that retromae did not make (a hub
    download's own exports): its exports are kept in the cache, which the preflight does not foresee."""
    made = command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)
    for relative in EXPORT_FILES.values():
        (made["M"] / relative).parent.mkdir(exist_ok=True)
        (made["M"] / relative).write_text("not ours")
    made["onnx index"] = recording(made, made["I"].with_name("onnx-idx"), backend="onnx")
    return made


def encoded(backend: str, quantize: str = "none") -> Callable[[dict[str, Path], Path], object]:
    return lambda inputs, out: Encoder.load(inputs["M"], backend=backend, quantize=quantize).encode(
        TEXTS, show_progress=False)


# Every path of the API that exports: (the call, what it writes)
PATHS = {
    "Encoder onnx": (encoded("onnx"), None),
    "Encoder onnx int8": (encoded("onnx", "int8"), None),
    "Encoder openvino": (encoded("openvino"), None),
    "Searcher": (lambda inputs, out: Searcher.load(inputs["onnx index"]).search(TEXTS), None),
    "retromae.encode": (lambda inputs, out: retromae.encode(model=str(inputs["M"]), corpus=str(inputs["C"]),
                                                            output=str(out), backend="onnx"), "folder"),
    "retromae.search": (lambda inputs, out: retromae.search(index=str(inputs["onnx index"]), query=TEXTS), None),
    "retromae.evaluate": (lambda inputs, out: retromae.evaluate(model=str(inputs["M"]), data=str(inputs["B"]),
                                                                output=str(out), backend="onnx"), "file"),
    "retromae.mine": (lambda inputs, out: retromae.mine(model=str(inputs["M"]), data=str(inputs["B"]),
                                                        output=str(out), backend="onnx"), "file"),
    "retromae.adapt (its guard)": (lambda inputs, out: retromae.adapt(
        model=str(inputs["M"]), pooling="cls", corpus=str(inputs["C"]), output=str(out), max_steps=1,
        backend="onnx", cache_dir=str(out.with_name("token-stores"))), "folder"),
}
SERVED = [name for name in PATHS if "adapt" not in name]  # adapt's candidates are exported afresh (weights in memory)


@contextlib.contextmanager
def sealed(folder: Path, fill: Callable[[], None]) -> Iterator[Path]:
    """`folder` filled by `fill`, then read-only: a tmpfs remounted read-only as root (root ignores permissions),
    else its folders made 0555."""
    if os.geteuid() != 0:
        folder.mkdir()
        fill()
        folders = [folder, *(path for path in folder.rglob("*") if path.is_dir())]
        for path in folders:
            path.chmod(0o555)
        yield folder
        for path in folders:
            path.chmod(0o755)
        return
    with tmpfs(folder, "size=16m"):
        fill()
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder


def listing(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(path), path.stat().st_size) for path in folder.rglob("*"))


@pytest.fixture(scope="module")
def served(inputs, tmp_path_factory) -> Iterator[tuple[Path, dict[str, np.ndarray]]]:
    """A read-only cache holding the model's three exports, made before it was sealed, and their vectors."""
    cache = tmp_path_factory.mktemp("served") / "cache"
    made = {}

    def fill() -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RETROMAE_CACHE", str(cache))
            patch.setattr(backends, "export_onnx", quick_onnx_export)
            for name in ("Encoder onnx", "Encoder onnx int8", "Encoder openvino"):
                made[name] = PATHS[name][0](inputs, cache)

    with sealed(cache, fill):
        yield cache, made


@pytest.mark.parametrize("path", SERVED)
def test_a_read_only_cache_holding_the_export_serves_it(path, served, inputs, tmp_path, monkeypatch):
    cache, made = served
    monkeypatch.setenv("RETROMAE_CACHE", str(cache))
    before = listing(cache)
    got = PATHS[path][0](inputs, tmp_path / "out")
    if path in made:
        assert np.abs(np.asarray(got) - made[path]).max() <= 1e-6
    assert listing(cache) == before


def refusal(setting: str, cache: Path, sealed: Path) -> str:
    """The one line refusing an export into `cache` in the read-only folder `sealed`, in the words of the
    preflight's."""
    return (rf"{re.escape(setting)}: {re.escape(str(cache))}/exports/[0-9a-f]{{32}}/(onnx|openvino): cannot be "
            rf"written \(it would be made in {re.escape(str(sealed))}\): [A-Za-z -]+; choose another folder")


@pytest.mark.parametrize("path", PATHS)
def test_an_export_a_read_only_cache_must_take_is_refused_in_one_line_naming_it(path, read_only, inputs,  # noqa: F811
                                                                             tmp_path, monkeypatch):
    monkeypatch.setenv("RETROMAE_CACHE", str(read_only))
    call, writes = PATHS[path]
    out = tmp_path / ("out" if writes != "file" else "out.json")
    with pytest.raises(FileSystemError) as refused:
        call(inputs, out)
    assert re.fullmatch(refusal("$RETROMAE_CACHE", read_only, read_only), str(refused.value))
    assert os.listdir(read_only) == [] and not os.path.lexists(out)


@pytest.mark.parametrize("setting", ["$RETROMAE_CACHE", "the default cache"])
def test_the_command_line_says_it_in_one_line(setting, read_only, inputs, tmp_path, monkeypatch,  # noqa: F811
                                              capsys):
    if setting == "$RETROMAE_CACHE":
        monkeypatch.setenv("RETROMAE_CACHE", str(read_only))
        cache = read_only
    else:
        monkeypatch.delenv("RETROMAE_CACHE", raising=False)
        monkeypatch.setenv("HOME", str(read_only))
        cache = read_only / ".cache" / "retromae"
    out = tmp_path / "out"
    assert main(["encode", "--model", str(inputs["M"]), "--corpus", str(inputs["C"]), "--output", str(out),
                 "--backend", "onnx", "--no-progress"]) == 1
    line = error_line(capsys)
    assert re.fullmatch("retromae: error: " + refusal(setting, cache, read_only), line), line
    assert os.listdir(read_only) == [] and not os.path.lexists(out)


# Item 2: an OSError naming a path, raised in an entry point of the API, is a FileSystemError of the CLI's line.

OS_ERRORS = {
    "a path": (OSError(errno.EROFS, "Read-only file system", "/x/shards"), "/x/shards: Read-only file system"),
    "a rename's two": (OSError(errno.EXDEV, "Invalid cross-device link", "/x/a.tmp", None, "/y/a"),
                       "/x/a.tmp -> /y/a: Invalid cross-device link"),
    "a path, printable": (FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/a\nb"),
                          "/x/a\\nb: No such file or directory"),
}


@pytest.mark.parametrize("case", OS_ERRORS)
def test_an_os_error_naming_a_path_leaves_an_entry_point_as_a_file_system_error(case):
    error, line = OS_ERRORS[case]

    def failing() -> None:
        raise error

    with pytest.raises(FileSystemError) as raised:
        quiet_entry_point(failing)()
    assert str(raised.value) == line and raised.value.__cause__ is error


@pytest.mark.parametrize("error", [OSError("no path named"), ModelLoadError("/m: not a model"), ValueError("/x")])
def test_other_errors_leave_an_entry_point_as_they_are(error):
    def failing() -> None:
        raise error

    with pytest.raises(type(error)) as raised:
        quiet_entry_point(failing)()
    assert raised.value is error
