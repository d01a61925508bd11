"""Pseudo-queries made from a corpus alone, for any text: with or without sentence marks, cased or not.

Owns the kinds of query `retromae adapt` makes from a document:
- `keywords`: a few of the document's highest tf-idf words (idf over the corpus, English stopwords and words of
  fewer than 3 characters left out), in the order they first appear: a short search such as a person types;
- `sentence`: one of its sentences of MIN_QUERY_WORDS+ words, or, in text without sentence marks (a lower-cased,
  unpunctuated collection), a window of WINDOW_WORDS consecutive words: a passage's worth of the document;
- `title`: the document's title, where the corpus gives one and the document has a body besides: what a paper, a
  page or an entry says it is about, in an author's words (a kind the distillation trains on only when asked: on
  SciFact it cost more than a seed moves the gain);
- `passage`: a sentence or window of the body (never the title) taken out of the document, the rest of the document
  its target (the inverse cloze task): a query that shares no passage with what it finds.
The distillation trains on the kinds of --distill-kinds (`sentence` and `keywords` by default; `training_kinds`);
the guard validates each objective on a kind it does not train on (`VALIDATION_KINDS`): `keywords` for the objectives
that train on pieces of one document (cropping, TSDAE, RetroMAE, MLM), `passage` for the distillation. Does not own
the split (`retromae.adaptation.data`) or the teacher (`adaptation.distill`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from retromae.data.corpus import Document
from retromae.runtime.errors import DataError

MIN_QUERY_WORDS = 4  # a sentence query has at least this many words
WINDOW_WORDS = (6, 12)  # the shortest and longest word window, in text without sentence marks
KEYWORDS = (3, 6)  # the fewest and most keywords of a keyword query
KEYWORD_POOL = 10  # keywords are drawn from the document's this many highest tf-idf words
MIN_KEYWORD_CHARS = 3
MIN_REST_WORDS = 8  # a passage query's target keeps at least this many words of its document
VALIDATION_KINDS = {"distill": "passage"}  # the guard's query kind by objective; every other objective: keywords
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
WORD = re.compile(r"\w+")


def _stopwords() -> frozenset[str]:
    # bm25s's English list: the one BM25 uses here (`retromae.retrieval.bm25`); imported only when queries are made
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def content_words(text: str, stopwords: frozenset[str]) -> list[str]:
    """The lower-cased words of `text` a keyword query may use, in order (repeats kept)."""
    return [word for word in WORD.findall(text.lower())
            if len(word) >= MIN_KEYWORD_CHARS and word not in stopwords and not word.isdigit()]


class KeywordQueries:
    """Keyword queries of documents of one corpus: tf-idf with the idf of `corpus`."""

    def __init__(self, corpus: Sequence[str]) -> None:
        self.stopwords = _stopwords()
        frequency: Counter[str] = Counter()
        for text in corpus:
            frequency.update(set(content_words(text, self.stopwords)))
        self.idf = {word: math.log(len(corpus) / count) for word, count in frequency.items()}

    def top_words(self, text: str) -> list[str]:
        """The document's KEYWORD_POOL highest tf-idf words (ties by first appearance), words found in every
        document left out."""
        words = content_words(text, self.stopwords)
        counts = Counter(words)
        order = {word: position for position, word in reversed(list(enumerate(words)))}
        ranked = sorted((word for word in counts if self.idf.get(word, 0.0) > 0),
                        key=lambda word: (-counts[word] * self.idf[word], order[word]))
        return ranked[:KEYWORD_POOL]

    def query(self, text: str, rng: np.random.Generator) -> str | None:
        """The top word and KEYWORDS[0]-KEYWORDS[1] in all of the top words, the others drawn at random, in their
        order in the text; None when the document has fewer than KEYWORDS[0] such words."""
        pool = self.top_words(text)
        if len(pool) < KEYWORDS[0]:
            return None
        count = int(rng.integers(KEYWORDS[0], min(KEYWORDS[1], len(pool)) + 1))
        chosen = {pool[0], *rng.choice(pool[1:], size=count - 1, replace=False).tolist()}
        first = {word: position for position, word in reversed(list(enumerate(content_words(text, self.stopwords))))}
        return " ".join(sorted(chosen, key=first.__getitem__))


def sentence_query(text: str, rng: np.random.Generator) -> str | None:
    """One sentence of `text` of MIN_QUERY_WORDS+ words; in text without sentence marks a window of
    WINDOW_WORDS words; None when `text` is shorter than the shortest window."""
    sentences = [s for s in SENTENCE_END.split(text.strip()) if len(s.split()) >= MIN_QUERY_WORDS]
    if len(sentences) >= 2:
        return sentences[int(rng.integers(len(sentences)))]
    words = text.split()
    if len(words) < WINDOW_WORDS[0]:
        return None
    length = int(rng.integers(WINDOW_WORDS[0], min(WINDOW_WORDS[1], len(words)) + 1))
    start = int(rng.integers(len(words) - length + 1))
    return " ".join(words[start:start + length])


def title_query(document: Document) -> str | None:
    """The document's title, or None when it has none or nothing besides it."""
    return document.title if document.title and document.text != document.title else None


def passage_query(document: Document, rng: np.random.Generator) -> tuple[str, str] | None:
    """A sentence (or word window) of the document's body and the document without it (its title kept), both with
    their white space made single spaces, or None when the body gives no sentence query or fewer than
    MIN_REST_WORDS words would be left."""
    title = " ".join(document.title.split())
    flat = " ".join(document.text.split())  # a word window is joined by single spaces: it is found in the flat text
    body = flat[len(title):].lstrip() if title else flat  # `text` is the title, a space, the body
    query = sentence_query(body, rng)
    if query is None:
        return None
    start = body.find(query)
    rest = " ".join((title + " " + body[:start] + " " + body[start + len(query):]).split())
    return (query, rest) if len(rest.split()) >= MIN_REST_WORDS else None


def training_kinds(documents: Sequence[Document], wanted: Sequence[str]) -> tuple[str, ...]:
    """The kinds of `wanted` the distillation trains on, in turn: `title` left out of a corpus without titles;
    DataError when none is left."""
    kinds = tuple(kind for kind in wanted if kind != "title" or any(title_query(document) for document in documents))
    if not kinds:
        raise DataError("--distill-kinds title: no document of the corpus has a title (and a body besides); "
                        "add sentence or keywords")
    return kinds


def validation_kind(objective: str) -> str:
    """The kind of query the guard validates `objective` on: one it does not train on."""
    return VALIDATION_KINDS.get(objective, "keywords")
