"""The model card (README.md) of every encoder folder a training run exports.

Owns the card's text: the model it started from, the training that produced it (pre-training objective or
fine-tuning, data, steps, batch, lengths, learning rate), how the folder encodes (pooling, normalisation, maximum
length, dimensions and similarity, read from the folder itself) and how to load it. It replaces the card that
sentence-transformers writes, which knows none of the training ("Base model: Unknown"). The commands say what
their training was (`pretraining_facts`, `finetuning_facts`); this module does not own exporting
(`retromae.export`) or the runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from retromae.config import config_to_dict
from retromae.data.lines import read_json_file
from retromae.encoder import describe_folder
from retromae.evaluation.experiments import describe_pretraining
from retromae.io import write_text_atomic

CARD = "README.md"


def pretraining_facts(config: Any, steps: int | None = None) -> dict[str, str]:
    """The card's facts of a `retromae pretrain` run (`steps`: those done, when fewer than --max-steps)."""
    done = config.max_steps if steps is None else steps
    start = (f"{config.init_from} (continued pre-training)" if config.init_from else
             f"random weights in the configuration of {config.model}" if config.from_config else config.model)
    return {"Base model": start,
            "Training": f"pre-training: {describe_pretraining(config_to_dict(config))}",
            "Training data": ", ".join(map(str, config.corpus or [config.pairs])),
            "Steps": (f"{done:,} of {config.max_steps:,}" if done != config.max_steps else f"{done:,}")
                     + f" steps of {config.batch_size} blocks of {config.max_length} tokens per device, peak learning "
                       f"rate {config.learning_rate:g}, seed {config.seed}"}


def finetuning_facts(config: Any, description: str) -> dict[str, str]:
    """The card's facts of a `retromae finetune` run; `description` (its progress bar's) names its negatives,
    distillation and steps."""
    data = f"{config.data} (split {config.split})" if Path(config.data).is_dir() else str(config.data)
    return {"Base model": str(config.model),
            "Training": f"dense-retrieval {description}",
            "Training data": data,
            "Steps": f"{config.max_steps:,} steps of {config.batch_size} queries per device, queries up to "
                     f"{config.query_max_length} and passages up to {config.passage_max_length} tokens, peak "
                     f"learning rate {config.learning_rate:g}, seed {config.seed}"}


def card_text(folder: Path, title: str, facts: Mapping[str, str]) -> str:
    """The card of one exported folder: `facts` about its training, then how the folder encodes and loads."""
    spec = describe_folder(str(folder))
    shown = f"{folder.parent.name}/{folder.name}"  # the run folder and this one: no absolute path in a shared card
    config = read_json_file(folder / "config.json")
    similarity = "cosine" if spec.pooling.normalize else "dot product"
    length = f"{spec.max_length} tokens" if spec.max_length else "the model's position limit"
    header = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity",
              "tags:", "- sentence-transformers", "- feature-extraction", "- retromae", "---", ""]
    lines = [f"# {title}", "", "Written by `retromae`.", ""]
    lines += [f"- **{name}:** {value}" for name, value in facts.items()]
    lines += [f"- **Encoding:** {spec.pooling.pooling} pooling{', normalised' if spec.pooling.normalize else ''}, "
              f"inputs up to {length}, {config.get('hidden_size', '?')} dimensions, scored by {similarity}",
              "", "## Use", "", "```python", "from sentence_transformers import SentenceTransformer", "",
              f'model = SentenceTransformer("{shown}")', 'vectors = model.encode(["a query", "a passage"])', "```",
              "", f"or `retromae encode --model {shown} --corpus FILE --output DIR`, `retromae evaluate --model "
              f"{shown} --data BEIR_FOLDER`.", ""]
    return "\n".join(header + lines)


def write_model_cards(folders: Iterable[Path], title: str, facts: Mapping[str, str]) -> None:
    """README.md in every one of `folders` that exists, written atomically."""
    for folder in map(Path, folders):
        if folder.is_dir():
            write_text_atomic(folder / CARD, card_text(folder, title, facts))
