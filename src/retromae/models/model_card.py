"""The model card (README.md) of every encoder folder a training run exports.

Owns the card's text: the model it started from, the training that produced it (pre-training objective or
fine-tuning, data, steps, batch, lengths, learning rate), how the folder encodes (pooling, normalisation, maximum
length, dimensions and similarity, read from the folder itself) and how to load it. It replaces the card that
sentence-transformers writes, which knows none of the training ("Base model: Unknown"). The runs say what their
training was (`retromae.pretraining.run.pretraining_facts`, `retromae.finetuning.run.finetuning_facts`) and may add
tags to the card's front matter, which `card_tags` reads back (`retromae adapt` tags its exports `ADAPTED_TAG`); this
module does not own exporting (`retromae.models.export`) or the runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from retromae.models.encoder import describe_folder
from retromae.runtime.io import write_text_atomic
from retromae.runtime.lines import read_json_file

CARD = "README.md"
ADAPTED_TAG = "retromae-adapt"  # the tag of the card of a `retromae adapt` export that is not the base unchanged
FRONT_MATTER_LINES, FRONT_MATTER_LINE_CHARACTERS = 50, 4096  # how far `card_tags` reads for the front matter's end


def card_text(folder: Path, title: str, facts: Mapping[str, str], tags: Sequence[str] = ()) -> str:
    """The card of one exported folder: `facts` about its training, then how the folder encodes and loads; `tags`
    join the front matter's."""
    spec = describe_folder(str(folder))
    shown = f"{folder.parent.name}/{folder.name}"  # the run folder and this one: no absolute path in a shared card
    config = read_json_file(folder / "config.json")
    similarity = "cosine" if spec.pooling.normalize else "dot product"
    length = f"{spec.max_length} tokens" if spec.max_length else "the model's position limit"
    header = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity",
              "tags:", "- sentence-transformers", "- feature-extraction", "- retromae", *(f"- {tag}" for tag in tags),
              "---", ""]
    lines = [f"# {title}", "", "Written by `retromae`.", ""]
    lines += [f"- **{name}:** {value}" for name, value in facts.items()]
    lines += [f"- **Encoding:** {spec.pooling.pooling} pooling{', normalised' if spec.pooling.normalize else ''}, "
              f"inputs up to {length}, {config.get('hidden_size', '?')} dimensions, scored by {similarity}",
              "", "## Use", "", "```python", "from sentence_transformers import SentenceTransformer", "",
              f'model = SentenceTransformer("{shown}")', 'vectors = model.encode(["a query", "a passage"])', "```",
              "", f"or `retromae encode --model {shown} --corpus FILE --output DIR`, `retromae evaluate --model "
              f"{shown} --data BEIR_FOLDER`.", ""]
    return "\n".join(header + lines)


def write_model_cards(folders: Iterable[Path], title: str, facts: Mapping[str, str], tags: Sequence[str] = ()) -> None:
    """README.md in every one of `folders` that exists, written atomically."""
    for folder in map(Path, folders):
        if folder.is_dir():
            write_text_atomic(folder / CARD, card_text(folder, title, facts, tags))


def card_tags(folder: str | Path) -> tuple[str, ...]:
    """The tags of the front matter of `folder`'s README.md (a `---` block first, its `tags:` list): none where the
    folder has no card (or something else than a regular file there) or its card no front matter. Read as a possibly
    hostile file: the start of its first lines only, undecodable bytes replaced."""
    path = Path(folder) / CARD
    if not path.is_file():
        return ()
    with path.open(encoding="utf-8", errors="replace") as file:
        lines = [file.readline(FRONT_MATTER_LINE_CHARACTERS).rstrip("\n") for _ in range(FRONT_MATTER_LINES)]
    if lines[0].strip() != "---" or "---" not in (line.strip() for line in lines[1:]):
        return ()
    front = lines[1:1 + [line.strip() for line in lines[1:]].index("---")]
    tags, listing = [], False
    for line in front:
        if line.strip() == "tags:":
            listing = True
        elif listing and line.lstrip().startswith("- "):
            tags.append(line.lstrip()[2:].strip())
        elif line.strip():
            listing = False
    return tuple(tags)
