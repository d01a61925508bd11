"""Round nine: faiss's graphs (HNSW, NSG) and a residual quantizer's beam search and codeword tables are weighed
with the rest of an index before faiss allocates them (`retrieval.faiss_options.check_factory_fits`), so that
`index`, `evaluate` and `search --factory` refuse in one line what would exhaust the memory. Tested at scales that
allocate nothing: the vectors are one row broadcast to millions."""

from __future__ import annotations

import numpy as np
import pytest

from retromae.retrieval import faiss_options
from retromae.retrieval.faiss_options import check_factory_fits, memory_parts
from retromae.retrieval.index import build_index
from retromae.runtime.options import ConfigError

FREE = 1_000_000_000
# factory, rows of 64 dimensions, what the refusal names
TOO_BIG = {
    "HNSW512,Flat": (10_000_000, "HNSW512's graph links each of 10,000,000 vectors to about 1025 others"),
    "HNSW32_SQ8": (20_000_000, "HNSW32's graph links each of 20,000,000 vectors to about 65 others"),
    "NSG64,Flat": (2_000_000, "NSG64's graph of 2,000,000 vectors is pruned from their 64 nearest"),
    "RQ8x16": (200_000, "RQ8x16 keeps a table of 120,259,084,288 codeword products"),
    "RQ1x16_2x8": (200_000, "RQ1x16_2x8's beam search of 5 over 65,536 codewords"),
    "PRQ2x4x14": (200_000, "PRQ2x4x14 keeps a table of 3,221,225,472 codeword products"),
    "IVF1024,RQ4x8": (2_000_000, "RQ4x8's beam search of 5 over 256 codewords"),
}


@pytest.fixture()
def little_memory(monkeypatch):
    monkeypatch.setattr(faiss_options, "available_memory", lambda: FREE)


def broadcast(rows: int, dimension: int = 64) -> np.ndarray:
    """`rows` vectors that take the memory of one."""
    return np.broadcast_to(np.ones((1, dimension), dtype=np.float32), (rows, dimension))


@pytest.mark.parametrize("factory", list(TOO_BIG))
def test_an_index_whose_build_exceeds_the_free_memory_is_refused_naming_what_allocates(little_memory, factory):
    rows, named = TOO_BIG[factory]
    with pytest.raises(ConfigError) as refused:
        build_index(broadcast(rows), factory)
    message = str(refused.value)
    assert message.startswith(f"--factory: {factory!r}: ") and "\n" not in message, message
    assert named in message and f"more than the {FREE:,} bytes this machine has free; give " in message, message


@pytest.mark.parametrize(("factory", "rows"), [("HNSW32,Flat", 1_000_000), ("NSG32,Flat", 200_000),
                                               ("RQ4x8", 100_000), ("IVF65536_HNSW32,Flat", 200_000_000)])
def test_an_index_that_fits_passes(little_memory, factory, rows):
    check_factory_fits(factory, min(rows, 200_000), rows, 64)


def test_the_graph_of_an_ivf_quantizer_is_over_its_lists():
    (what, size, _), = memory_parts("IVF65536_HNSW32,Flat", 200_000, 10 ** 9, 64)
    assert "65,536 vectors" in what and size == 65_536 * (20 + 261)


def test_hnsw_links_follow_faiss_s_levels():
    """2·M links on level 0, M on each level above; a vector is above level l with probability M^-l."""
    (_, size, _), = memory_parts("HNSW8,Flat", 100, 1000, 8)
    assert size == 1000 * (faiss_options.HNSW_VECTOR_BYTES + int(np.ceil(4 * (16 + 8 / 7))))


def test_parts_add_up_in_one_refusal(monkeypatch):
    monkeypatch.setattr(faiss_options, "available_memory", lambda: 10 ** 6)
    with pytest.raises(ValueError, match=r"bytes in all, more than the 1,000,000 bytes"):
        check_factory_fits("HNSW32_RQ2x8", 10_000, 10_000, 64)
