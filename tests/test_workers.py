"""DataLoader workers start with tokenizers' parallelism off, whatever the parent's setting, which stays."""

import os

from torch.utils.data import DataLoader, Dataset

from retromae.data.workers import TOKENIZERS_SWITCH, started_workers


class Environment(Dataset):
    """Item i: the worker's TOKENIZERS_PARALLELISM."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> str:
        return os.environ.get(TOKENIZERS_SWITCH, "unset")


def test_workers_see_tokenizers_parallelism_off_and_the_parent_keeps_its_own(monkeypatch):
    monkeypatch.delenv(TOKENIZERS_SWITCH, raising=False)
    loader = DataLoader(Environment(), batch_size=None, num_workers=1)
    assert list(started_workers(loader)) == ["false", "false"]
    assert TOKENIZERS_SWITCH not in os.environ


def test_a_users_choice_stays_the_parents(monkeypatch):
    monkeypatch.setenv(TOKENIZERS_SWITCH, "true")
    assert list(started_workers(DataLoader(Environment(), batch_size=None, num_workers=1))) == ["false", "false"]
    assert os.environ[TOKENIZERS_SWITCH] == "true"
