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
from collections.abc import Iterator

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
                 "ht": (int, 0, (1 << 16) + 1), "k_factor": (float, 1, 1 << 16), "k_factor_rf": (float, 1, 1 << 16),
                 "parallel_mode": (int, 0, 1 << 8), "bounded_queue": (int, 0, 1), "verbose": (int, 0, 1)}
# The search settings an index file stores that no --params sets, with the numbers each takes: a residual
# quantizer's beam when it encodes (faiss's default 5), and a residual coarse quantizer's beam as a multiple of k (a
# negative one is faiss's "every codeword", bounded by the file's own size). The stored settings --params sets (an
# HNSW's efSearch, an NSG's search_L read as efSearch, an IVF's nprobe and max_codes, a refinement's k_factor, a PQ's
# ht) take the bounds of SEARCH_PARAMS.
STORED_PARAMS = {"max_beam_size": (int, 1, 1 << 10), "beam_factor": (float, 1, 1 << 16)}
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
    takes (`FACTORY_NUMBERS`), a character faiss does not read (not ASCII: `IVF١٠`), or a string of no component;
    the names of `COMPRESSED` pass."""
    if not factory.strip():
        raise ValueError("is empty; give a faiss factory string, e.g. Flat, HNSW32 or IVF1024,PQ32, or int8 or "
                         "binary")
    if factory in COMPRESSED:
        return
    if not factory.isascii():
        raise ValueError(f"{factory!r}: holds {ascii(next(c for c in factory if not c.isascii()))}, which no faiss "
                         "component is named or numbered with (ASCII letters and the digits 0-9); e.g. Flat, HNSW32, "
                         "IVF1024,PQ32")
    for match in re.finditer(r"([A-Za-z]*)([0-9]+)", factory):
        letters, number = match.group(1), int(match.group(2))
        low, high = FACTORY_NUMBERS.get(letters, OTHER_NUMBERS)
        if not low <= number <= high:
            part = f"{letters}{number}" if letters else f"the number {number}"
            raise ValueError(f"{factory!r}: {part} is outside what faiss takes there ({low} to {high}); e.g. Flat, "
                             "HNSW32, IVF1024,PQ32")


# The parts of a factory string that cluster the training vectors: an IVF's lists (IVF4, nested IVF4(IVF2,Flat)
# too), a multi-index's 2^bits centroids per half (IMI2x8), and the 2^bits codewords of each codebook of a product or
# additive quantizer (PQ32 = PQ32x8, RQ4x12, RQ1x12_2x8, LSQ4x12; PRQ and PLSQ: splits x codebooks x bits).
LIST_PARTS = re.compile(r"(?<![A-Za-z])(IVF|IMI)([0-9]+)(?:x([0-9]+))?")
CODEBOOK_PARTS = re.compile(r"(?<![A-Za-z])(PQ|RQ|LSQ|PRQ|PLSQ)([0-9]+)(?:x([0-9]+))?(?:x([0-9]+))?"
                            r"((?:_[0-9]+x[0-9]+)*)")
PQ_BITS = 8  # faiss's default bits per code of a PQ without "x"
# The graphs of an HNSW or NSG index over the vectors, or over an IVF's lists when it is that IVF's quantizer
# (IVF65536_HNSW32).
GRAPH_PARTS = re.compile(r"(?<![A-Za-z])(?:IVF([0-9]+)_)?(HNSW|NSG)([0-9]+)")
# faiss's HNSW (impl/HNSW.cpp): a vector's level is above 0 with probability 1/M, each level one more with 1/M again
# (`set_default_probas`, levelMult 1/ln M); it links to 2·M others on level 0 and M on each level above, as int32;
# and keeps its level (int), its offset into the links (size_t) and, while adding, a lock (`hnsw_add_vertices`).
HNSW_VECTOR_BYTES = 4 + 8 + 8
# faiss's NSG (IndexNSG::add with index_factory's build_type 1, impl/NNDescent.cpp, impl/NSG.cpp `build`): the
# graph of each vector's GK nearest is found by NN-descent, which keeps for every vector a candidate pool of
# L = GK + 50 (id, distance, flag) entries, lists of new and old neighbours (2·S and 2·R ints with its S = 10,
# R = 100) and a mutex with the lists' headers; then, the pool gone, the GK int64 ids of the graph while the pruned
# graph of R (id, distance) pairs, the final graph of R int32 ids, a mutex and a degree a vector are made. Measured
# against faiss 1.15.1's peak (its copy of the vectors aside): within 7% from 5,000 to 50,000 vectors of 64 and 384
# dimensions, NSG16 to NSG64; 16-20% low at 2,000, where a constant megabyte counts.
NSG_GK = 64
NSG_DESCENT_BYTES = 12 * (NSG_GK + 50) + 4 * (2 * 10 + 2 * 100) + 168
NSG_MUTEX_BYTES = 40
# faiss's ResidualQuantizer (impl/ResidualQuantizer.cpp): `max_beam_size`, 5 (no factory string sets another); the
# scratch of its beam search per vector (`memory_per_point`: two beams of residuals, a beam² of float distances and
# int64 ids), in batches of at most `max_mem_distances` (5 GiB).
RQ_BEAM = 5
RQ_SCRATCH = 5 << 30


def check_factory_fits(factory: str, vectors: int, rows: int, dimension: int) -> None:
    """ValueError when the index `factory` names cannot be trained on `vectors` training vectors
    (`check_trainable`), or when what faiss allocates to build it over `rows` vectors of
    `dimension` (`memory_parts`) exceeds the memory free (`runtime.cgroups.available_memory`), before faiss
    allocates any of it. The names of `COMPRESSED` pass (SQ8 trains on any count). `check_factory` has checked each
    number alone."""
    if factory in COMPRESSED:
        return
    check_trainable(factory, vectors)
    parts = list(memory_parts(factory, vectors, rows, dimension))
    total, free = sum(size for _, size, _ in parts), available_memory()
    if free is None or total <= free:
        return
    said = ", and ".join(f"{what}, {size:,} bytes" for what, size, _ in parts if size)
    advice = max(parts, key=lambda part: part[1])[2]
    in_all = f": {total:,} bytes in all" if sum(1 for _, size, _ in parts if size) > 1 else ""
    raise ValueError(f"{factory!r}: {said}{in_all}, more than the {free:,} bytes this machine has free; {advice}")


def check_trainable(factory: str, vectors: int) -> None:
    """ValueError when the index `factory` names cannot be trained on `vectors` training vectors: an IVF with more
    lists than vectors (faiss needs a vector for each centroid, and found that out only after allocating 3 GB for
    IVF16777216), an IMI or a quantizer codebook with more centroids (2^bits) than vectors."""
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
        bits = max(_codebook_bits(match)[1])
        if 1 << bits > vectors:
            raise ValueError(f"{factory!r}: {match.group(0)} has {1 << bits} codewords a codebook ({bits} bits), but "
                             f"there are {vectors} vectors to train them on, and faiss needs at least one for each "
                             f"codeword; give fewer bits (at most {vectors.bit_length() - 1}) or more vectors")


def _codebook_bits(match: re.Match) -> tuple[int, list[int]]:
    """(splits, the bits of each codebook of one split) of a `CODEBOOK_PARTS` match: PQ32 is 1 split of 32
    codebooks of 8 bits, RQ1x12_2x8 1 of [12, 8, 8], PRQ2x4x6 2 of [6, 6, 6, 6]."""
    kind, numbers = match.group(1), [int(number) for number in match.groups()[1:4] if number is not None]
    if kind in ("PRQ", "PLSQ"):
        splits, books, bits = (numbers + [1, PQ_BITS])[:3]
        return splits, [bits] * books
    books, bits = (numbers + [PQ_BITS])[:2]
    more = [[int(n) for n in item.split("x")] for item in match.group(5).split("_") if item]
    return 1, [bits] * books + [width for count, width in more for _ in range(count)]


Part = tuple[str, int, str]  # what allocates, its bytes, the advice that makes it smaller


def memory_parts(factory: str, vectors: int, rows: int, dimension: int) -> Iterator[Part]:
    """What faiss allocates besides the vectors' codes to build the index `factory` names over `rows` vectors of
    `dimension`, trained on `vectors`: an HNSW's or NSG's graph (`graph_part`), the pairwise table an LSQ trains with
    (codebooks² x 4^bits float32), the beam search and codeword-product tables of a residual quantizer (`rq_parts`)."""
    for match in GRAPH_PARTS.finditer(factory):
        yield graph_part(match, rows)
    for match in CODEBOOK_PARTS.finditer(factory):
        kind, (splits, bits) = match.group(1), _codebook_bits(match)
        if kind.endswith("LSQ"):
            books, size = len(bits), 1 << bits[0]
            yield (f"{match.group(0)} trains with a table of {books}² x {size}² numbers",
                   4 * books * books * size * size, "give fewer bits or codebooks")
        elif kind.endswith("RQ"):
            yield from rq_parts(match.group(0), splits, bits, vectors, rows, max(1, dimension // splits))


def graph_part(match: re.Match, rows: int) -> Part:
    """The graph of an HNSW (`HNSW_VECTOR_BYTES` and its links, 2·M + M/(M-1) on average) or an NSG (NN-descent's
    `NSG_DESCENT_BYTES`, or the pruning of the `NSG_GK` nearest to R where that is more) over `rows` vectors, or
    over the lists of the IVF it quantizes."""
    lists, kind, size = match.group(1), match.group(2), int(match.group(3))
    nodes = int(lists) if lists else rows
    if kind == "HNSW":
        links = 2 * size + size / (size - 1)
        per = HNSW_VECTOR_BYTES + math.ceil(4 * links)
        return (f"{match.group(0)}'s graph links each of {nodes:,} vectors to about {links:.0f} others ({per} bytes a "
                "vector)", nodes * per, "give a smaller M (e.g. HNSW32) or fewer vectors")
    per = max(NSG_DESCENT_BYTES, 8 * NSG_GK + 12 * size + NSG_MUTEX_BYTES + 4)
    return (f"{match.group(0)}'s graph of {nodes:,} vectors is pruned from their {NSG_GK} nearest ({per} bytes a "
            "vector)", nodes * per, "give a smaller R (e.g. NSG32) or fewer vectors")


def rq_parts(text: str, splits: int, bits: list[int], vectors: int, rows: int, dimension: int) -> Iterator[Part]:
    """A residual quantizer's (`splits` of them, each over `dimension` of the vector, one trained at a time): its
    beam search, training or adding, whichever takes more; and the products of each codeword with those of the
    codebooks before it, float32, kept with the index (`compute_codebook_tables`: Σ 2^bits[m] x Σ_{j<m} 2^bits[j]).
    Training keeps `RQ_BEAM` residuals, codes and distances per training vector, two of each (the step's and the
    next one's); adding encodes in batches of `RQ_SCRATCH` over faiss's `memory_per_point` (two beams of residuals,
    a beam² of results), each vector of a batch also given the distances of its beam to every codeword of the
    largest codebook, which `memory_per_point` leaves out (RQ2x12 adding 20,000 vectors of 64 took 1.8 GB)."""
    books, sizes = len(bits), [1 << bit for bit in bits]
    point = RQ_BEAM * dimension * 8 + RQ_BEAM * RQ_BEAM * 12
    adding = min(rows, max(1, RQ_SCRATCH // point)) * (point + RQ_BEAM * 4 * max(sizes))
    training = vectors * (RQ_BEAM * 4 * (2 * dimension + 2 * books + 2) + 4 * dimension)
    yield (f"{text}'s beam search of {RQ_BEAM} over {max(sizes):,} codewords", max(training, adding),
           "give fewer bits, or a PQ")
    products = sum(size * sum(sizes[:m]) for m, size in enumerate(sizes))
    yield (f"{text} keeps a table of {splits * products:,} codeword products", 4 * splits * products,
           "give fewer bits or codebooks")


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
        value = float(text) if NUMBER_TEXT.fullmatch(text) else math.nan  # faiss reads `1_0` as 1, float() as 10
        check_search_value(known, value, f"{name}={text}")


def check_search_value(name: str, value: float, shown: str) -> None:
    """ValueError naming `shown` unless `value` is within what the search parameter `name` takes
    (`SEARCH_PARAMS`, `STORED_PARAMS`): the one bound of a parameter given by --params or stored in an index file."""
    kind, low, high = {**SEARCH_PARAMS, **STORED_PARAMS}[name]
    if not low <= value <= high or (kind is int and not float(value).is_integer()):
        what = "a whole number" if kind is int else "a number"
        raise ValueError(f"{shown}: must be {what} from {low} to {high}")
