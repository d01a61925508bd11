"""Outputs never overlap inputs, and --overwrite removes only what a run of the same command wrote (issue 50, items
2, 6 and 8; issue 54, item 7).

Generated over every command that writes an output: its --output at one of its inputs (with --overwrite, as our own
refusals used to advise) is refused in one line before anything is deleted, and every input file is left byte for
byte. Then the audit's cases: an index over an encoding folder, an encoding over an index, a pre-training over a
model folder no run made, a run that fails before its first step, and a lock's advice.
"""

import json
import shutil
from pathlib import Path

import pytest
from conftest import command_inputs

from retromae.cli import main
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import LOCK_FILE, check_apart, claim_folder, hold, release


def snapshot(*paths: Path) -> dict[str, bytes]:
    files = [file for path in paths for file in ([path] if path.is_file() else sorted(path.rglob("*")))]
    return {str(file): file.read_bytes() for file in files if file.is_file() and not file.name.startswith(".")}


@pytest.fixture()
def inputs(tiny_model_dir, tmp_path, capsys):
    """A model folder, a BEIR folder, its encoding, its index, a training file and a pre-training corpus."""
    found = command_inputs(tmp_path, tiny_model_dir)
    capsys.readouterr()
    return {**found, "tmp": tmp_path}


# Each command with its --output on an input (the letters name `inputs`); all with --overwrite.
OVERLAPS = {
    "index": "index --embeddings E --output E",
    "encode": "encode --model M --corpus C --output M",
    "pretrain": "pretrain --model M --corpus C --output M --max-steps 1 --max-length 32",
    "pretrain inside its model": "pretrain --model M --corpus C --output M/run --max-steps 1 --max-length 32",
    "finetune": "finetune --model M --data B --output B --max-steps 1",
    "train-reranker": "train-reranker --model M --data T --output M --max-steps 1",
    "adapt": "adapt --model M --pooling cls --corpus C --output M --max-steps 2",
    "evaluate": "evaluate --model M --data B --output M",
    "evaluate --save-run": "evaluate --model M --data B --save-run Q",
    "bm25": "bm25 --corpus C --queries Q --output Q",
    "search": "search --index I --queries E --output E/ids.txt",
    "score": "score --model M --data T --output T",
    "mine": "mine --data B --negatives bm25 --output C",
    "report": "report --variants E --output E",
    "quickstart": "quickstart --data B --output B",
}


@pytest.mark.parametrize("case", OVERLAPS)
def test_an_output_on_an_input_is_refused_before_anything_is_deleted(case, inputs, capsys):
    args = [str(inputs[word[0]] / word[2:]) if word[0] in inputs and word[1:2] in ("", "/") else word
            for word in OVERLAPS[case].split()]
    before = snapshot(*(inputs[key] for key in "MBEIT"))
    assert main([*args, "--overwrite"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "overlaps" in lines[0] and "which this command reads" in lines[0], lines
    assert snapshot(*(inputs[key] for key in "MBEIT")) == before


def test_overwrite_never_removes_another_command_s_outputs(inputs, capsys):
    """`encode --output IDX --overwrite` replaced an index's ids.txt; `index --output EMB --overwrite` an
    encoding's: each folder is another command's, so both are refused and nothing changes."""
    other = inputs["tmp"] / "emb2"
    assert main(["encode", "--model", str(inputs["M"]), "--queries", str(inputs["Q"]), "--output", str(other),
                 "--no-progress"]) == 0
    capsys.readouterr()
    before = snapshot(inputs["E"], inputs["I"], other)
    assert main(["encode", "--model", str(inputs["M"]), "--corpus", str(inputs["Q"]), "--output", str(inputs["I"]),
                 "--overwrite"]) == 2
    assert main(["index", "--embeddings", str(inputs["E"]), "--output", str(other), "--overwrite"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all("never writes over another command's outputs" in line for line in errors)
    assert "holds the outputs of `retromae index`" in errors[0] and "`retromae encode`" in errors[1]
    assert snapshot(inputs["E"], inputs["I"], other) == before


def test_overwrite_never_removes_files_no_run_recorded(inputs, tmp_path, capsys):
    """`pretrain --output tcopy --overwrite` over a model folder deleted its config.json (and the refusal read
    "another run of `retromae ?`")."""
    copy = tmp_path / "tcopy"
    shutil.copytree(inputs["M"], copy)
    before = snapshot(copy)
    for extra in ([], ["--overwrite"]):
        assert main(["pretrain", "--model", str(inputs["M"]), "--corpus", str(inputs["C"]), "--output", str(copy),
                     "--max-steps", "1", "--max-length", "32", *extra]) == 2
        line = capsys.readouterr().err.strip()
        assert "config.json, which no retromae run recorded writing" in line and "`retromae ?`" not in line
    assert snapshot(copy) == before


def test_a_run_that_fails_before_its_first_step_leaves_its_folder_free(inputs, tmp_path, capsys):
    """A corpus read as [UNK] fails after the folder is claimed; the corrected command then runs (it was refused as
    "another run"), and a started run's folder is still kept from a run of other options."""
    foreign = tmp_path / "cyrillic.jsonl"
    foreign.write_text("".join(json.dumps({"id": str(i), "text": f"Привет мир текст {i}"}) + "\n" for i in range(40)))
    run = ["pretrain", "--model", str(inputs["M"]), "--output", str(tmp_path / "run"), "--max-steps", "1",
           "--batch-size", "2", "--max-length", "32"]
    assert main([*run, "--corpus", str(foreign)]) == 2
    assert "[UNK]" in capsys.readouterr().err
    assert main([*run, "--corpus", str(inputs["C"])]) == 0
    assert (tmp_path / "run" / "encoder" / "model.safetensors").is_file()
    assert main([*run, "--corpus", str(inputs["C"]), "--seed", "3"]) == 2
    assert "holds the outputs of another run of `retromae pretrain` (seed differ)" in capsys.readouterr().err


def test_check_apart_cases(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "file.txt").write_text("x")
    check_apart(tmp_path / "out", [data])  # apart
    check_apart(data, [data / "file.txt"], ours=("results.md",))  # an input beside what the command writes
    for output, ours in ((data, ()), (data / "sub", ()), (data, ("file.txt",)), (data, ("sub",))):
        given = data / "sub" if ours == ("sub",) else data / "file.txt" if ours else data
        with pytest.raises(ConfigError, match="overlaps"):
            check_apart(output, [given], ours=ours)
    with pytest.raises(ConfigError, match="overlaps"):
        check_apart(data / "file.txt", [data / "file.txt"], kind="file")
    check_apart(data / "run.trec", [data], kind="file")  # a run file beside its data set
    for read in ("queries.jsonl", "corpus.jsonl.gz", "qrels/test.tsv", "sts-test.csv", "ids.txt", "model.safetensors"):
        with pytest.raises(ConfigError, match="overlaps"):
            check_apart(data / read, [data], kind="file")
    (tmp_path / "link").symlink_to(data)
    with pytest.raises(ConfigError, match="overlaps"):
        check_apart(tmp_path / "link", [data])


def test_a_lock_names_resume_only_for_a_command_that_has_it(tmp_path):
    """`index` advised a --resume it lacks when its folder was in use."""
    folder = tmp_path / "out"
    assert hold(folder, folder / LOCK_FILE) is None
    try:
        import subprocess
        import sys
        code = ("import sys; from pathlib import Path; from retromae.runtime.run_folder import hold, LOCK_FILE; "
                "f = Path(sys.argv[1]); print(hold(f, f / LOCK_FILE, resumable=False)); "
                "print(hold(f, f / LOCK_FILE, resumable=True))")
        done = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, check=True)
        plain, resumable = done.stdout.strip().splitlines()
        assert "in use by another retromae process" in plain and "--resume" not in plain
        assert "then --resume" in resumable
    finally:
        release()
    claim_folder(folder, "index", {}, ("ids.txt",), resumable=False)
    release()
