"""What the retrieval commands hand faiss, checked before faiss sees it: index factory strings and search parameters;
and the index types `--factory` names besides faiss's own strings (`COMPRESSED`), with the options of each.

faiss checks some of its inputs with a C++ exception (caught as a one-line refusal) and others not at all: `HNSW0`
fails an assertion and aborts the process, `HNSW1`, `RR0` and `PQ4x0` crash it, `NSG2` never returns, and
`efSearch=-1` searches with one candidate without a word. So every number in a factory string and every search
parameter is checked here first, torch- and faiss-free, by `check_factory` and `check_search_params`: the options'
`check` (`runtime.options.option`) for the command line, config files and the Python API, and again where the
library hands them on (`retrieval.index`: an index's stored parameters, the functions of the API). Does not own
building or searching an index (`retrieval.index`).

The compressed types, declared here once for `index`, `evaluate`, `search` and the API: `int8` is faiss's scalar
quantizer (`SQ8`: a byte per dimension, 4x less memory than float32); `binary` keeps each dimension's sign bit (32x
less) in a faiss binary index, searched by Hamming distance for a shortlist of `--shortlist` x k rows that are then
rescored with the float vectors (kept beside it on disk, memory-mapped) by the index's metric. `--shortlist` acts
only on a binary index and faiss's search parameters (`--params`) on any other.
"""

from __future__ import annotations

import math
import re

from retromae.runtime.cgroups import available_memory
from retromae.runtime.lines import NUMBER_TEXT
from retromae.runtime.options import Acts, Domain

# The smallest and largest number each factory component may carry (the letters right before a number; "" for a
# number after "_" or "x" inside a component, e.g. OPQ16_64, PQ32x8). faiss crashes below these minima; the maxima
# keep a typo (HNSW32000) from asking for more memory than any machine has. Other numbers: at least 1.
FACTORY_NUMBERS = {"HNSW": (2, 512), "NSG": (4, 512), "x": (1, 16), "IVF": (1, 1 << 24), "PQ": (1, 4096),
                   "RR": (1, 1 << 16), "PCA": (1, 1 << 16), "PCAR": (1, 1 << 16), "PCAW": (1, 1 << 16),
                   "PCAWR": (1, 1 << 16), "OPQ": (1, 4096), "Pad": (1, 1 << 16), "SQ": (4, 8)}
OTHER_NUMBERS = (1, 1 << 24)
# faiss's search parameters (faiss.ParameterSpace) with the numbers each takes: whole numbers unless a float is
# meant (k_factor), from the minimum up to the maximum. A `quantizer_` prefix names the same of an IVF's quantizer.
SEARCH_PARAMS = {"nprobe": (int, 1, 1 << 24), "efSearch": (int, 1, 1 << 20), "max_codes": (int, 0, 1 << 40),
                 "ht": (int, 0, 1 << 16), "k_factor": (float, 1, 1 << 16), "k_factor_rf": (float, 1, 1 << 16),
                 "parallel_mode": (int, 0, 1 << 8), "bounded_queue": (int, 0, 1), "verbose": (int, 0, 1)}
# The index types named instead of a factory string: int8 builds faiss's factory string SQ8, binary a faiss
# IndexBinaryFlat of the sign bits with float rescoring (`retrieval.index.BinaryIndex`). Any other `--factory` is a
# faiss factory string, recorded as type "factory" in index.json.
COMPRESSED = {"int8": "SQ8", "binary": "BFlat"}
INDEX_TYPES = ("factory", *COMPRESSED)
BINARY = "binary"
# A binary index's shortlist, as a multiple of the k asked for: the Hamming search's best SHORTLIST x k rows are
# rescored with the float vectors; 1 rescores only the k the Hamming search found.
SHORTLIST = 10
SHORTLIST_RANGE = Domain(1, 1000)
WITH_BINARY = Acts(lambda config: config.factory == BINARY, "with --factory binary (the rows rescored per hit)",
                   {"factory": BINARY}, ({"factory": "Flat"},))
NOT_BINARY = Acts(lambda config: config.factory != BINARY, "with a --factory other than binary (a binary index "
                  "takes --shortlist, no faiss search parameter)", {"factory": "Flat"}, ({"factory": BINARY},))
# The factory components faiss trains before vectors are added (coarse quantizers, product and scalar quantizers,
# transforms): only an index holding one is trained on a sample of the vectors, drawn with `--seed`.
TRAINED_PARTS = ("IVF", "IMI", "PQ", "SQ", "PCA", "ITQ", "LSH", "RR")


def trains(factory: str) -> bool:
    """Whether the index `factory` names is trained before vectors are added (int8 is faiss's SQ8: trained)."""
    return any(part in COMPRESSED.get(factory, factory) for part in TRAINED_PARTS)


WHEN_TRAINED = Acts(lambda config: trains(config.factory), "with a --factory that is trained (IVF, PQ, SQ, int8, "
                    "PCA, ...: its training sample is drawn with the seed)", {"factory": "IVF4,Flat"},
                    ({"factory": "Flat"}, {"factory": "HNSW32"}, {"factory": BINARY}))


def search_knob(factory: str) -> str | None:
    """The one search setting that trades the index `factory` names between speed and recall (`retrieval.recall`
    sets it for a target recall): nprobe for an IVF (or IMI) index, whatever its quantizer, efSearch for HNSW, the
    shortlist of a binary index; None for the indexes that search every code alike (Flat, int8, PQ, LSH, ...)."""
    if factory == BINARY:
        return "shortlist"
    spec = COMPRESSED.get(factory, factory)
    if "IVF" in spec or "IMI" in spec:
        return "nprobe"
    return "efSearch" if "HNSW" in spec else None


def param_names(params: str) -> list[str]:
    """The names of faiss search parameters ("efSearch=128,nprobe=32" -> efSearch, nprobe)."""
    return [part.partition("=")[0].strip() for part in params.split(",") if part.strip()]


APPROXIMATE = Acts(lambda config: config.factory != "Flat", "with an approximate --factory (Flat finds what exact "
                   "search finds)", {"factory": "HNSW8"}, ({"factory": "Flat"},))
TUNED = Acts(lambda config: search_knob(config.factory) is not None, "with a --factory searched with a knob that "
             "trades speed for recall (HNSW: efSearch, IVF: nprobe, binary: the shortlist)", {"factory": "HNSW8"},
             ({"factory": "Flat"}, {"factory": "int8"}))


def index_type(factory: str) -> str:
    """The type index.json records for `factory` (one of `INDEX_TYPES`)."""
    return factory if factory in COMPRESSED else "factory"


def check_shortlist(value: object) -> None:
    """ValueError unless `value` (read from an index.json) is a whole number in `SHORTLIST_RANGE`, what the
    `--shortlist` options take."""
    if isinstance(value, bool) or not isinstance(value, int) or not SHORTLIST_RANGE.holds(value):
        raise ValueError(f"{value!r}: {SHORTLIST_RANGE.describe()} (a whole number: the rows rescored, as a multiple "
                         "of k)")


def check_factory(factory: str) -> None:
    """ValueError naming the first number of a faiss factory string ("IVF1024,PQ32x8") outside what its component
    takes (`FACTORY_NUMBERS`), or a string of no component; the names of `COMPRESSED` pass."""
    if not factory.strip():
        raise ValueError("is empty; give a faiss factory string, e.g. Flat, HNSW32 or IVF1024,PQ32, or int8 or "
                         "binary")
    if factory in COMPRESSED:
        return
    for match in re.finditer(r"([A-Za-z]*)(\d+)", factory):
        letters, number = match.group(1), int(match.group(2))
        low, high = FACTORY_NUMBERS.get(letters, OTHER_NUMBERS)
        if not low <= number <= high:
            part = f"{letters}{number}" if letters else f"the number {number}"
            raise ValueError(f"{factory!r}: {part} is outside what faiss takes there ({low} to {high}); e.g. Flat, "
                             "HNSW32, IVF1024,PQ32")


# The parts of a factory string that cluster the training vectors: an IVF's lists (IVF4, nested IVF4(IVF2,Flat)
# too), a multi-index's 2^bits centroids per half (IMI2x8), and the 2^bits codewords of each codebook of a product or
# additive quantizer (PQ32 = PQ32x8, RQ4x12, LSQ4x12; PRQ and PLSQ: splits x codebooks x bits).
LIST_PARTS = re.compile(r"(?<![A-Za-z])(IVF|IMI)(\d+)(?:x(\d+))?")
CODEBOOK_PARTS = re.compile(r"(?<![A-Za-z])(PQ|RQ|LSQ|PRQ|PLSQ)(\d+)(?:x(\d+))?(?:x(\d+))?")
PQ_BITS = 8  # faiss's default bits per code of a PQ without "x"


def check_factory_fits(factory: str, vectors: int) -> None:
    """ValueError when the index `factory` names cannot be trained on `vectors` training vectors, or would fill the
    memory while training, before faiss allocates it: an IVF with more lists than vectors (faiss needs a vector for
    each centroid, and found that out only after allocating 3 GB for IVF16777216), an IMI or a quantizer codebook
    with more centroids (2^bits) than vectors, and an LSQ whose codebooks' pairwise table (codebooks² x 4^bits
    float32) exceeds the memory free (`runtime.cgroups.available_memory`). The names of `COMPRESSED` pass (SQ8
    trains on any count). `check_factory` has checked each number alone."""
    if factory in COMPRESSED:
        return
    root = max(1, math.isqrt(vectors))
    for match in LIST_PARTS.finditer(factory):
        kind, first, bits = match.group(1), int(match.group(2)), match.group(3)
        centroids = first if kind == "IVF" else 1 << int(bits or 0)
        if centroids > vectors:
            what, advice = ((f"{first} lists", f"at most {vectors} lists, e.g. IVF{root} (about the square root of "
                             "the vector count)") if kind == "IVF" else
                            (f"{centroids} centroids in each of its {first} parts",
                             f"at most {vectors.bit_length() - 1} bits, or an IVF such as IVF{root}"))
            raise ValueError(f"{factory!r}: {match.group(0)} asks for {what}, but there are {vectors} vectors to "
                             f"train it on, and faiss needs at least one for each centroid; give {advice}")
    for match in CODEBOOK_PARTS.finditer(factory):
        kind = match.group(1)
        numbers = [int(number) for number in match.groups()[1:] if number is not None]
        split = kind in ("PRQ", "PLSQ")
        bits = numbers[2 if split else 1] if len(numbers) > (2 if split else 1) else PQ_BITS
        books = numbers[1] if split and len(numbers) > 1 else numbers[0]
        if 1 << bits > vectors:
            raise ValueError(f"{factory!r}: {match.group(0)} has {1 << bits} codewords a codebook ({bits} bits), but "
                             f"there are {vectors} vectors to train them on, and faiss needs at least one for each "
                             f"codeword; give fewer bits (at most {vectors.bit_length() - 1}) or more vectors")
        table = 4 * books * books * (1 << (2 * bits)) if kind.endswith("LSQ") else 0
        free = available_memory()
        if free is not None and table > free:
            raise ValueError(f"{factory!r}: {match.group(0)} trains with a table of {books}² x {1 << bits}² numbers, "
                             f"{table:,} bytes, more than the {free:,} bytes this machine has free; give fewer bits or "
                             "codebooks")


def check_search_params(params: str) -> None:
    """ValueError naming the first `name=value` of faiss search parameters ("efSearch=128,nprobe=32") that faiss does
    not know or whose value is outside what it takes (`SEARCH_PARAMS`) or not in plain decimal notation
    (`lines.NUMBER_TEXT`)."""
    for item in filter(None, (part.strip() for part in params.split(","))):
        name, equals, text = item.partition("=")
        known = name.removeprefix("quantizer_")
        if known not in SEARCH_PARAMS or not equals:
            raise ValueError(f"{item!r} is not NAME=VALUE of a faiss search parameter ({', '.join(SEARCH_PARAMS)}; "
                             "quantizer_NAME for an IVF's quantizer)")
        kind, low, high = SEARCH_PARAMS[known]
        value = float(text) if NUMBER_TEXT.fullmatch(text) else math.nan  # faiss reads `1_0` as 1, float() as 10
        if not low <= value <= high or (kind is int and not value.is_integer()):
            what = "a whole number" if kind is int else "a number"
            raise ValueError(f"{name}={text}: must be {what} from {low} to {high}")
