"""`retromae adapt`: the base's pooling and similarity kept, the guard and its interval, pseudo-queries of any text,
the distillation and its losses, the model card, `--resume`, and the inputs it refuses."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import WORDS, kill_after_checkpoint
from safetensors.torch import load_file

from retromae.adaptation.config import AdaptConfig
from retromae.adaptation.data import MIN_HELD_OUT, split_corpus
from retromae.adaptation.guard import Candidate, Gain, averaged, decide, measure_gain, systems
from retromae.adaptation.run import NEXT_STEPS, adapted_before, next_step
from retromae.adaptation.run import adapt as run_adapt
from retromae.commands import show
from retromae.data.corpus import Document
from retromae.models.model_card import card_tags, write_model_cards
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError


def adapt(config):
    """The library's run, its result printed as the command prints it (`retromae.commands.show`); the folder."""
    return show(run_adapt(config))


def topical_corpus(path: Path, count: int = 220, seed: int = 0) -> Path:
    """`count` documents of three sentences each, every document drawing its words from five of its own: a held-out
    sentence shares its document's words, so even a random encoder finds some documents from their sentences."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        topic = rng.sample(WORDS, 5)
        sentences = [" ".join(rng.choice(topic) for _ in range(rng.randint(6, 10))) + "." for _ in range(3)]
        lines.append(json.dumps({"id": str(i), "text": " ".join(sentences)}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def declared_base(tmp_path, tiny_model_dir) -> Path:
    """The tiny model with our metadata declaring mean pooling and normalised vectors (cosine)."""
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    (base / "retromae_encoder.json").write_text(json.dumps({"pooling": "mean", "normalize": True}))
    return base


def tiny_adapt(base: Path, corpus: Path, output: Path, **overrides) -> AdaptConfig:
    """A tiny run of the cropping objective (the pre-training stage's options); `objective="distill"` overrides."""
    values = dict(model=str(base), corpus=[str(corpus)], output=str(output), objective="cropping", max_steps=4,
                  batch_size=4, max_length=32, checkpoints=2, validation_queries=20, validation_documents=80,
                  log_every=1, learning_rate=1e-3, cache_dir=str(output.parent / "cache"))
    return AdaptConfig(**{**values, **overrides})


def base_state(base: Path) -> dict[str, torch.Tensor]:
    return {name.removeprefix("bert."): tensor for name, tensor in load_file(str(base / "model.safetensors")).items()
            if name.startswith("bert.")}


def test_pooling_and_similarity_come_from_the_base(tmp_path, declared_base):
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out"))
    for folder in ("encoder", "training/encoder"):  # the winner, and the training stage's last step
        exported = json.loads((output / folder / "retromae_encoder.json").read_text())
        assert (exported["pooling"], exported["normalize"]) == ("mean", True)
    stage = json.loads((output / "training" / "config.json").read_text())
    assert (stage["objective"], stage["pooling"], stage["normalize"]) == ("cropping", "mean", True)
    assert stage["freeze_encoder_steps"] == 0 and stage["save_every"] == 2  # cropping has no fresh head to warm
    checkpoints = sorted(path.name for path in (output / "training" / "checkpoints").iterdir())
    assert checkpoints == ["step-0000004"]  # the guard weighs the last one only, so the earlier one is not kept
    modules = json.loads((output / "sentence-transformer" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    guard = json.loads((output / "guard.json").read_text())
    assert [c["name"] for c in guard["candidates"]] == ["base", "step 4, averaged with the base at 0.5"]
    assert all(0 <= c["ndcg@10"] <= 1 for c in guard["candidates"])
    base, candidate = guard["candidates"]
    assert candidate["gain"] == pytest.approx(candidate["ndcg@10"] - base["ndcg@10"])
    wins = candidate["gain"] > 0 and candidate["interval"][0] > 0  # the candidate only beyond the noise
    assert candidate["relative_gain"] == pytest.approx(candidate["ndcg@10"] / base["ndcg@10"] - 1)
    low, high = candidate["relative_interval"]
    assert (low > 0) == (candidate["interval"][0] > 0)  # the same resamples: the verdict reads either alike
    assert guard["chosen"] == (candidate["name"] if wins else "base")
    assert {"base", "bm25", "base+bm25"} <= set(guard["systems"]) <= set(NEXT_STEPS)
    assert guard["systems"]["base"] == pytest.approx(base["ndcg@10"])  # the same queries, the same search
    assert all(0 <= value <= 1 for value in guard["systems"].values())


def test_the_guard_scores_what_a_user_can_run_next_on_its_queries():
    from retromae.data.retrieval_sets import Passage, RetrievalSet

    corpus = {"d1": Passage("", "solar panels convert light"), "d2": Passage("", "wind turbines spin blades"),
              "d3": Passage("", "rivers carry sediment downstream")}
    queries, qrels = {"q1": "solar light", "q2": "turbines blades"}, {"q1": {"d1": 1}, "q2": {"d2": 1}}
    validation = RetrievalSet(corpus, queries, qrels)
    wrong = Candidate(0, 1.0, run={"q1": {"d3": 0.9, "d1": 0.1}, "q2": {"d3": 0.9, "d2": 0.1}})
    right = Candidate(1, 0.5, run={"q1": {"d1": 0.9, "d3": 0.1}, "q2": {"d2": 0.9, "d3": 0.1}})
    scores = systems(validation, wrong, right)
    assert scores["adapted"] == 1.0 and scores["bm25"] == 1.0 and scores["base"] < 1.0
    assert scores["base+bm25"] <= scores["adapted+bm25"] == 1.0  # fused as `search` fuses, at its depth
    assert set(systems(validation, wrong, wrong)) == {"base", "bm25", "base+bm25"}  # no adapted model exported


def test_the_closing_lines_name_the_best_next_step_and_its_commands(tmp_path):
    config = AdaptConfig(model="base-model", corpus=["c.jsonl"], output=str(tmp_path / "out"))
    lines = next_step(config, {"base": 0.64, "bm25": 0.66, "base+bm25": 0.69, "adapted": 0.67, "adapted+bm25": 0.70})
    head, command = lines.split("\n")
    assert head.index("the adapted model in a hybrid with BM25 0.7000") < head.index("the base alone 0.6400")
    assert f"--model {tmp_path / 'out'}/sentence-transformer --corpus c.jsonl" in command and "--hybrid" in command
    assert "--model base-model" in next_step(config, {"base": 0.7, "bm25": 0.6, "base+bm25": 0.65}).split("\n")[1]


def test_a_harmful_run_exports_the_base_unchanged_and_says_so(tmp_path, declared_base, capfd):
    # A learning rate of 50 without clipping wrecks the encoder at its first step; no average is offered.
    config = tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", learning_rate=50.0,
                        head_learning_rate=50.0, max_grad_norm=0.0, warmup_ratio=0.0, mix=[1.0])
    output = adapt(config)
    guard = json.loads((output / "guard.json").read_text())
    scores = {c["name"]: c["ndcg@10"] for c in guard["candidates"]}
    assert guard["chosen"] == "base" and max(scores.values()) == scores["base"]
    assert "no candidate beat the base" in capfd.readouterr().out  # the verdict is a result: standard output
    exported = load_file(str(output / "encoder" / "model.safetensors"))
    for name, tensor in base_state(declared_base).items():
        torch.testing.assert_close(exported[name], tensor, rtol=0, atol=0)


def test_resume_continues_the_same_trajectory(tmp_path, declared_base, monkeypatch):
    corpus = topical_corpus(tmp_path / "c.jsonl")
    whole = adapt(tiny_adapt(declared_base, corpus, tmp_path / "whole"))
    kill_after_checkpoint(monkeypatch, 2, lambda: adapt(tiny_adapt(declared_base, corpus, tmp_path / "cut")))
    resumed = adapt(tiny_adapt(declared_base, corpus, tmp_path / "cut", resume=True))
    first, second = (json.loads((run / "guard.json").read_text()) for run in (whole, resumed))
    assert first["candidates"] == second["candidates"]
    weights = [load_file(str(run / "encoder" / "model.safetensors")) for run in (whole, resumed)]
    for name, tensor in weights[0].items():  # the tiny masked LM has no pooler: AutoModel draws one, unused
        if not name.startswith("pooler."):
            torch.testing.assert_close(weights[1][name], tensor)


def test_adapting_then_fine_tuning_in_one_command(tmp_path, declared_base):
    from conftest import tiny_beir

    tiny_beir(tmp_path / "beir")
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", mix=[1.0],
                              train=str(tmp_path / "beir")))
    tuned = json.loads((output / "finetuned" / "encoder" / "retromae_encoder.json").read_text())
    assert (tuned["pooling"], tuned["normalize"]) == ("mean", True)  # the adapted encoder's, hence the base's
    assert 0 <= json.loads((output / "guard.json").read_text())["finetuned"] <= 1


def test_a_bad_training_file_is_named_before_the_adaptation_starts(tmp_path, declared_base):
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"query": "q", "pos": ["p"], "neg": ["n"]}) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{train}:2"):
        adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", train=str(train)))
    assert not (tmp_path / "out" / "training").exists()  # refused before any step


def test_the_command_with_labelled_validation_trains_on_the_whole_corpus(tmp_path, declared_base, capsys):
    from conftest import tiny_beir

    from retromae.cli import main

    tiny_beir(tmp_path / "beir")
    corpus = topical_corpus(tmp_path / "c.jsonl")
    code = main(["adapt", "--model", str(declared_base), "--corpus", str(corpus), "--output", str(tmp_path / "out"),
                 "--validation", str(tmp_path / "beir"), "--max-steps", "2", "--checkpoints", "1", "--mix", "1",
                 "--batch-size", "4", "--max-length", "32", "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    captured = capsys.readouterr()
    assert "validation ndcg@10, estimated on your labelled queries" in captured.out and "wrote" in captured.out
    assert "--validation-split test" in captured.err and "judged on" in captured.err  # chosen on its test set
    guard = json.loads((tmp_path / "out" / "guard.json").read_text())
    assert guard["validation"] == str(tmp_path / "beir") and len(guard["candidates"]) == 2
    assert len((tmp_path / "out" / "data" / "train.jsonl").read_text().splitlines()) == 220  # nothing held out
    assert not (tmp_path / "out" / "validation").exists()


def test_a_base_without_pooling_is_one_error_naming_the_option(tmp_path, tiny_model_dir):
    corpus = topical_corpus(tmp_path / "c.jsonl")
    with pytest.raises(ConfigError, match=r"declares no pooling.*modules\.json.*--pooling cls or --pooling mean"):
        adapt(tiny_adapt(tiny_model_dir, corpus, tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_corpus_too_small_for_validation_names_the_counts(tmp_path, declared_base):
    corpus = topical_corpus(tmp_path / "c.jsonl", count=60)
    with pytest.raises(DataError, match=rf"too small for a validation split: 60 documents.*at most 6.*{MIN_HELD_OUT}"):
        adapt(tiny_adapt(declared_base, corpus, tmp_path / "out"))


def test_distill_is_validated_on_passages_taken_out_of_held_out_documents():
    from retromae.adaptation.queries import validation_kind

    assert validation_kind("distill") == "passage"  # it trains on keywords and on sentences left in their documents
    assert {validation_kind(name) for name in ("cropping", "tsdae", "retromae", "mlm")} == {"keywords"}
    documents = [Document(str(i), f"First sentence about protein{i} and cell{i} here. Second one of gene{i} and "
                                  f"other words. Third sentence names tissue{i} too.") for i in range(300)]
    originals = {d.text for d in documents}
    split = split_corpus(documents, held_out=25, seed=3, where="corpus", kind="passage")
    assert len(split.queries) == 25 and len(split.training) == 275
    for n in range(25):
        query, rest = split.queries[f"q{n}"], split.documents[f"d{n}"]
        whole = next(text for text in originals if query in text and rest.split()[-1] in text)
        assert query not in rest and len(rest.split()) + len(query.split()) == len(whole.split())


def test_a_passage_query_leaves_enough_of_its_document():
    from retromae.adaptation.queries import MIN_REST_WORDS, passage_query

    rng = np.random.default_rng(0)
    query, rest = passage_query(Document("a", "The first sentence has eight words in it. The second sentence has "
                                              "eight words as well."), rng)
    assert query.startswith("The ") and query not in rest and len(rest.split()) >= MIN_REST_WORDS
    assert passage_query(Document("b", "Only one sentence of seven words. Then four more words."),
                         rng) is None  # too little left
    words = [f"w{i}" for i in range(30)]
    for separator in (" ", "  ", "\n", " \t "):  # no sentence marks: a word window, whatever the white space
        window, rest = passage_query(Document("c", separator.join(words)), rng)
        start, length = words.index(window.split()[0]), len(window.split())
        assert window.split() == words[start:start + length]
        assert rest == " ".join(words[:start] + words[start + length:])


def test_a_passage_query_comes_from_the_body_and_its_target_keeps_the_title():
    from retromae.adaptation.queries import passage_query

    title = "A title sentence of its own."
    body = "The body has a first sentence here. The body has a second sentence too. And a third one of words."
    for seed in range(20):
        query, rest = passage_query(Document("a", f"{title} {body}", title), np.random.default_rng(seed))
        assert query in body and query != title and rest.startswith(title)
        assert len(rest.split()) + len(query.split()) == len(f"{title} {body}".split())


def test_the_distillation_asks_titles_only_when_told_and_the_corpus_has_them():
    from retromae.adaptation.distill import training_queries
    from retromae.adaptation.queries import title_query, training_kinds

    plain = [Document(str(i), f"First sentence about protein{i} and cell{i}. Second one of gene{i} and words.")
             for i in range(50)]
    titled = [Document(d.doc_id, f"Paper {d.doc_id} title {d.text}", f"Paper {d.doc_id} title") for d in plain]
    titles = {d.title for d in titled}
    every = ("sentence", "keywords", "title")
    assert AdaptConfig(model="m", corpus=["c"], output="o").distill_kinds == ["sentence", "keywords"]
    assert training_kinds(titled, every) == every and training_kinds(plain, every) == ("sentence", "keywords")
    assert title_query(Document("x", "Only a title", "Only a title")) is None  # nothing besides it to find
    with pytest.raises(DataError, match="--distill-kinds title: no document of the corpus has a title"):
        training_kinds(plain, ["title"])
    queries = training_queries(titled, 300, 0, every)
    assert len(queries) == 300 and sum(query in titles for query in queries) == 100  # every third, the others never
    assert not titles & set(training_queries(titled, 300, 0, ["sentence", "keywords"]))
    with pytest.raises(ConfigError, match="distill_kinds|distill-kinds"):
        AdaptConfig(model="m", corpus=["c"], output="o", distill_kinds=["title", "title"])


def test_a_corpus_too_short_for_passage_queries_names_what_a_document_needs():
    documents = [Document(str(i), f"tiny doc number {i}") for i in range(300)]
    with pytest.raises(DataError, match=r"only 0 have a sentence \(or a word window\) and 8 words besides"):
        split_corpus(documents, held_out=25, seed=3, where="corpus", kind="passage")


def test_a_corpus_in_another_language_names_the_unknown_share(tmp_path, declared_base):
    corpus = tmp_path / "greek.jsonl"
    lines = [json.dumps({"id": str(i), "text": "Το σύστημα ανάκτησης βρίσκει έγγραφα. Ένα δεύτερο κείμενο εδώ."})
             for i in range(220)]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"reads \d+% of its tokens as \[UNK\]"):
        adapt(tiny_adapt(declared_base, corpus, tmp_path / "out"))


def test_validation_queries_are_keywords_of_whole_held_out_documents():
    documents = [Document(str(i), f"first sentence about protein{i} and cell{i} here. second one of gene{i} too.")
                 for i in range(300)]
    split = split_corpus(documents, held_out=25, seed=3, where="corpus")
    assert len(split.queries) == 25 and len(split.training) == 275
    for n in range(25):
        query, document = split.queries[f"q{n}"], split.documents[f"d{n}"]
        assert 3 <= len(query.split()) <= 6 and document in {d.text for d in documents}  # kept whole
        assert set(query.split()) <= set(document.lower().replace(".", "").split())
        assert sorted(query.split()) == sorted(f"{w}{document.split('protein')[1].split()[0]}"
                                               for w in ("protein", "cell", "gene"))  # only words rare in the corpus


def punctuation_free_corpus(path: Path, count: int = 220, seed: int = 0) -> Path:
    """`count` lower-cased documents without a sentence mark (as NPL's), each drawing on five words of its own."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        topic = rng.sample(WORDS, 5)
        lines.append(json.dumps({"id": str(i), "text": " ".join(rng.choice(topic) for _ in range(24))}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_corpus_without_sentence_marks_is_adapted_by_either_objective(tmp_path, declared_base, capsys):
    corpus = punctuation_free_corpus(tmp_path / "c.jsonl")
    distilling = {"distill_queries": 40, "distill_candidates": 8, "list_size": 4}  # refused with cropping (issue 63)
    for objective, kind, options in (("cropping", "keyword", {}), ("distill", "passage", distilling)):
        output = adapt(tiny_adapt(declared_base, corpus, tmp_path / objective, objective=objective,
                                  validation_documents=20000, **options))
        guard = json.loads((output / "guard.json").read_text())
        assert len(guard["candidates"]) == 2 and guard["validation_set"].startswith(f"20 {kind} queries")
        assert "searched among all 220 documents" in guard["validation_set"]  # small corpus: all of it
        assert "estimated on queries made from your corpus" in capsys.readouterr().out
    assert (tmp_path / "distill" / "training" / "distilled" / "model.safetensors").is_file()


def test_distillation_without_enough_candidates_names_the_options(tmp_path, declared_base, monkeypatch):
    import retromae.adaptation.distill

    # every list too short
    monkeypatch.setattr(retromae.adaptation.distill, "pick_list", lambda scores, size, rng: None)
    config = tiny_adapt(declared_base, punctuation_free_corpus(tmp_path / "c.jsonl"), tmp_path / "out",
                        objective="distill", distill_queries=4, distill_candidates=2, list_size=4)
    with pytest.raises(DataError, match="--list-size 4 candidates.*top 2.*--distill-candidates"):
        adapt(config)


@pytest.mark.parametrize("requested,expected", [("bf16", torch.bfloat16), ("no", None)])
def test_the_distillation_trains_under_the_mixed_precision_asked_for(tmp_path, declared_base, monkeypatch,
                                                                     requested, expected):
    import retromae.adaptation.distill as distill
    from retromae.models.encoder import Encoder

    seen = []
    real = distill.student_logits

    def recording(*args):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return real(*args)

    monkeypatch.setattr(distill, "student_logits", recording)
    encoder = Encoder.load(declared_base)
    before = {name: tensor.clone() for name, tensor in encoder.model.state_dict().items()}
    lists = distill.TeacherLists(["alpha beta", "gamma delta"], np.array([[0, 1], [1, 0]]),
                                 np.array([[2.0, 0.0], [1.0, 0.5]], dtype=np.float32))
    config = tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", objective="distill",
                        list_size=2, batch_size=2, max_steps=2, mixed_precision=requested)
    assert distill.train_student(config, encoder, lists, ["alpha beta gamma", "delta epsilon"],
                                 {"query": "", "passage": ""}) == 2
    assert seen == [expected, expected]
    changed = [name for name, tensor in encoder.model.state_dict().items()
               if tensor.is_floating_point() and not torch.equal(tensor, before[name])]
    assert changed and all(tensor.dtype == torch.float32 for tensor in encoder.model.state_dict().values()
                           if tensor.is_floating_point())


def test_sentence_queries_fall_back_to_word_windows_without_sentence_marks():
    from retromae.adaptation.queries import WINDOW_WORDS, sentence_query

    rng = np.random.default_rng(0)
    text = " ".join(f"w{i}" for i in range(40))
    window = sentence_query(text, rng)
    assert WINDOW_WORDS[0] <= len(window.split()) <= WINDOW_WORDS[1] and window in text
    assert sentence_query("One sentence of five words. And another one of six words.", rng) in (
        "One sentence of five words.", "And another one of six words.")
    assert sentence_query("too short", rng) is None


def test_the_guard_refuses_a_candidate_whose_interval_reaches_the_base():
    base = Candidate(0, 1.0, 0.5, {f"q{i}": 0.5 for i in range(10)})
    # a mean gain of +0.03 carried by one query of ten: resampling the queries often leaves it out
    lucky = Candidate(4, 0.5, 0.53, {**{f"q{i}": 0.5 for i in range(9)}, "q9": 0.8})
    assert decide(base, [lucky], seed=0) is base
    low, high = lucky.gain.interval
    assert low <= 0 < 0.03 < high
    # a gain as large on every query: the interval is that gain alone, above 0
    steady = Candidate(8, 0.5, 0.531, {f"q{i}": 0.531 for i in range(10)})
    assert decide(base, [lucky, steady], seed=0) is steady
    assert steady.gain.interval == pytest.approx((0.031, 0.031))
    assert steady.gain.relative_interval == pytest.approx((0.062, 0.062))  # 0.031 of the base's 0.5


def test_the_gain_interval_is_a_seeded_paired_bootstrap():
    base = {"a": 0.2, "b": 0.4, "c": 0.9}
    candidate = {"a": 0.3, "b": 0.3, "c": 1.0}  # per query: +0.1, −0.1, +0.1
    gain = measure_gain(base, candidate, seed=1)
    assert measure_gain(base, candidate, seed=1) == gain
    low, high = gain.interval
    assert -0.1 - 1e-9 <= low < 0.1 / 3 < high <= 0.1 + 1e-9  # between the worst and best resample, around the mean
    assert gain.absolute == pytest.approx(0.1 / 3) and gain.relative == pytest.approx(1.6 / 1.5 - 1)
    low, high = gain.relative_interval
    assert -0.1 / 0.4 - 1e-9 <= low < gain.relative < high <= 0.1 / 0.2 + 1e-9  # the worst and best resample's ratio
    assert measure_gain(base, base, seed=1) == Gain(0.0, (0.0, 0.0), 0.0, (0.0, 0.0))


def test_a_gain_over_a_base_that_scores_0_has_no_relative_measure():
    base = {"a": 0.0, "b": 0.0, "c": 0.5}  # resamples of a and b alone score the base 0
    gain = measure_gain(base, {"a": 0.5, "b": 0.5, "c": 0.5}, seed=1)
    assert gain.absolute == pytest.approx(1 / 3) and gain.interval == pytest.approx((0.0, 0.5))
    assert gain.relative is None and gain.relative_interval is None


def test_the_verdict_says_the_gain_in_points_and_as_a_share_of_the_base():
    from retromae.adaptation.run import summary

    base = Candidate(0, 1.0, 0.5, {f"q{i}": 0.5 for i in range(10)})
    steady = Candidate(8, 0.5, 0.55, {f"q{i}": 0.55 for i in range(10)})
    assert decide(base, [steady], seed=0) is steady
    text = summary(steady, [base, steady], "10 passage queries of held-out documents", labelled=False)
    assert "  step 8, averaged with the base at 0.5           0.5500  +0.0500    +10.0%  [+0.0500, +0.0500]" in text
    assert ("exported step 8, averaged with the base at 0.5: +0.0500 over the base (0.5000, +10.0% of it), 95% "
            "interval [+0.0500, +0.0500], estimated on queries made from your corpus") in text
    assert "\n  on your own queries expect a gain, not this figure: " in text  # the size does not carry (issue 62)
    text = summary(steady, [base, steady], "10 passage queries of held-out documents", labelled=False,
                   adapted_before=True)  # a second round: not even the sign carried (docs/RESULTS.md 10.10)
    assert "\n  this base is an export of retromae adapt" in text and "not this figure" not in text
    text = summary(steady, [base, steady], "10 of your labelled queries (beir, split dev)", labelled=True,
                   adapted_before=True)
    assert "estimated on your labelled queries" in text and "not this figure" not in text
    assert "export of retromae adapt" not in text
    lucky = Candidate(4, 0.5, 0.53, {**{f"q{i}": 0.5 for i in range(9)}, "q9": 0.8})
    assert decide(base, [lucky], seed=0) is base
    text = summary(base, [base, lucky], "10 passage queries of held-out documents", labelled=False)
    assert "(step 4, averaged with the base at 0.5: +0.0300, its 95% interval [+0.0000, " in text
    assert text.endswith("reaches the base): exported the base unchanged")


def test_listwise_kl_and_margin_mse_on_a_hand_computed_case():
    import math

    from retromae.losses.losses import listwise_kl, margin_mse

    student = torch.tensor([[0.0, math.log(3.0)]])  # softmax (1/4, 3/4)
    teacher = torch.tensor([[math.log(3.0), 0.0]])  # softmax (3/4, 1/4)
    expected = 0.75 * math.log(0.75 / 0.25) + 0.25 * math.log(0.25 / 0.75)  # KL(teacher ‖ student)
    assert listwise_kl(student, teacher).item() == pytest.approx(expected)
    assert listwise_kl(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)
    # margins: student (1 − 3, 1 − 0) = (−2, 1), teacher (4 − 1, 4 − 2) = (3, 2): ((−5)² + (−1)²) / 2 = 13
    assert margin_mse(torch.tensor([[1.0, 3.0, 0.0]]), torch.tensor([[4.0, 1.0, 2.0]])).item() == pytest.approx(13.0)


def test_the_teachers_temperature_matches_the_students_spread():
    from retromae.adaptation.distill import matched_temperature, pick_list

    teacher = np.array([[1.0, 0.0], [0.5, 0.5]])  # spreads 0.5 and 0: mean 0.25
    base = np.array([[10.0, 0.0], [3.0, 1.0]])  # spreads 5 and 1: mean 3
    assert matched_temperature(teacher, base) == pytest.approx(0.25 / 3)
    scores = {7: 0.9, 3: 0.8, 5: 0.1, 1: 0.0, 2: 0.05}
    picked = pick_list(scores, 4, np.random.default_rng(0))
    assert picked[:2] == [7, 3] and set(picked[2:]) <= {5, 1, 2} and len(set(picked)) == 4
    assert pick_list(scores, 6, np.random.default_rng(0)) is None


def test_the_exports_card_names_the_base_the_objective_the_averaging_and_the_guards_scores(tmp_path, declared_base):
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out"))
    guard = json.loads((output / "guard.json").read_text())
    for folder in ("encoder", "sentence-transformer"):
        card = (output / folder / "README.md").read_text()
        assert f"**Base model:** {declared_base}" in card and "Unknown" not in card
        assert "objective cropping" in card and f"base {guard['base']:.4f}" in card
        assert ("averaged with the base at weight 0.5" in card) == (guard["chosen"] != "base")
        assert ("they tell whether it gains on real queries, not how much" in card) == (guard["interval"] is not None)
    exported = guard["chosen"] != "base"  # the base unchanged is not tagged: adapting it again is a first round
    assert ("retromae-adapt" in card_tags(output / "sentence-transformer")) == exported
    assert adapted_before(str(output / "sentence-transformer")) == exported and not guard["adapted_before"]


def test_a_second_round_is_known_by_the_cards_tag_and_said(tmp_path, declared_base):
    write_model_cards([declared_base], "an adapted encoder", {}, tags=("retromae-adapt",))  # as adapt's export
    again = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "again", max_steps=2))
    guard = json.loads((again / "guard.json").read_text())
    card = (again / "encoder" / "README.md").read_text()
    assert guard["adapted_before"]
    assert ("on a base adapted before" in card) == (guard["interval"] is not None)


def test_card_tags_reads_the_front_matter_of_a_possibly_hostile_card(tmp_path):
    assert card_tags(tmp_path) == ()  # no card
    card = tmp_path / "README.md"
    card.write_text("---\nlibrary_name: x\ntags:\n- a\n  - b\nlicense: mit\n---\n# Title\ntags:\n- not front\n")
    assert card_tags(tmp_path) == ("a", "b")
    card.write_text("# no front matter\n---\ntags:\n- a\n---\n")
    assert card_tags(tmp_path) == ()
    card.write_bytes(b"---\ntags:\n- caf\xff\n" + b"x" * 10_000_000)  # undecodable, no end of line or matter
    assert card_tags(tmp_path) == ()
    card.unlink()
    card.mkdir()  # not a regular file
    assert card_tags(tmp_path) == ()


def test_a_validation_fraction_keeps_the_other_labelled_queries_unseen(tmp_path, declared_base):
    from conftest import tiny_beir

    tiny_beir(tmp_path / "beir")
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", max_steps=2,
                              validation=str(tmp_path / "beir"), validation_fraction=0.25))
    guard = json.loads((output / "guard.json").read_text())
    assert guard["validation_set"].startswith("3 of your labelled queries")  # a quarter of 12 test queries
    unseen = (output / "unseen-qrels.tsv").read_text().splitlines()
    assert unseen[0] == "query-id\tcorpus-id\tscore" and len(unseen) == 1 + 9


def test_cropping_scores_crops_by_cosine_of_the_bases_pooling(tiny_tokenizer):
    from conftest import tiny_bert_config
    from transformers import BertForMaskedLM

    from retromae.models.encoder import PoolingConfig, pool
    from retromae.objectives import create_objective
    from retromae.objectives.contrastive import contrastive_loss

    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer))).eval()
    objective = create_objective("cropping", model, tiny_tokenizer).eval()
    objective.pooling = "mean"
    ids = torch.randint(5, 100, (4, 7))
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 6 + [0], [1] * 7])
    losses = objective({"input_ids": ids, "attention_mask": mask}, torch.Generator())
    hidden = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state
    expected = contrastive_loss(pool(hidden, mask, PoolingConfig("mean", True)), 0.05)
    torch.testing.assert_close(losses["loss"], expected)


def test_the_defaults_are_the_recipe_measured_on_scifact_npl_and_debian():
    config = AdaptConfig(model="m", corpus=["c.jsonl"], output="o")
    assert (config.objective, config.batch_size, config.learning_rate, config.passes) == ("distill", 64, 3e-5, 1.0)
    assert (config.distill_queries, config.list_size, config.distill_loss, config.teacher) == (2000, 8, "kl", None)
    assert (config.candidates, config.mix) == ("last", [0.5])  # the last checkpoint, averaged with the base


def test_with_candidates_all_the_guard_scores_every_checkpoint_at_every_weight(tmp_path, declared_base):
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out",
                              objective="tsdae", candidates="all", mix=[1.0, 0.5]))
    stage = json.loads((output / "training" / "config.json").read_text())
    assert (stage["objective"], stage["freeze_encoder_steps"]) == ("tsdae", 0)  # 10% of 4 steps: no warm-up
    guard = json.loads((output / "guard.json").read_text())
    assert [c["name"] for c in guard["candidates"]] == ["base", "step 2", "step 2, averaged with the base at 0.5",
                                                        "step 4", "step 4, averaged with the base at 0.5"]


def test_averaging_with_the_base_is_linear_and_keeps_integer_buffers():
    base = {"w": torch.tensor([0.0, 2.0]), "ids": torch.tensor([0, 1])}
    adapted = {"w": torch.tensor([4.0, 4.0]), "ids": torch.tensor([5, 5])}
    mixed = averaged(adapted, base, 0.25)
    torch.testing.assert_close(mixed["w"], torch.tensor([1.0, 2.5]))
    assert torch.equal(mixed["ids"], base["ids"])


@pytest.fixture()
def headless_base(tmp_path, tiny_tokenizer) -> Path:
    """A tiny encoder saved without an MLM head (as a sentence-transformers model ships), declaring mean pooling and
    normalised vectors."""
    from conftest import tiny_bert_config
    from transformers import BertModel

    base = tmp_path / "headless"
    torch.manual_seed(0)
    BertModel(tiny_bert_config(len(tiny_tokenizer)), add_pooling_layer=False).save_pretrained(base)
    tiny_tokenizer.save_pretrained(base)
    (base / "retromae_encoder.json").write_text(json.dumps({"pooling": "mean", "normalize": True}))
    return base


@pytest.mark.parametrize("objective,decoding", [("retromae", None), ("retromae", "basic"),
                                                ("retromae+contrastive", None)])
def test_adapting_with_retromae_decodes_from_the_bases_pooling_after_warming_the_fresh_heads(
        tmp_path, headless_base, objective, decoding):
    output = adapt(tiny_adapt(headless_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out",
                              objective=objective, decoding=decoding, head_warmup=0.5, mix=[1.0],
                              candidates="all"))
    stage = json.loads((output / "training" / "config.json").read_text())
    assert (stage["objective"], stage["pooling"], stage["normalize"]) == (objective, "mean", True)
    assert stage["decoding"] == decoding  # unless given, None: RetroMAE's own default (enhanced)
    assert stage["freeze_encoder_steps"] == 2 and stage["save_every"] == 2  # half of 4 steps warms the heads
    head = load_file(str(output / "training" / "pretrain_head.safetensors"))
    assert any(name.startswith("decoder.0.") for name in head)  # RetroMAE's fresh decoder ...
    assert any(name.startswith("encoder.cls.predictions.transform.") for name in head)  # ... and the fresh MLM head
    base = load_file(str(headless_base / "model.safetensors"))
    warmed = load_file(str(output / "training" / "checkpoints" / "step-0000002" / "model.safetensors"))
    for name, tensor in base.items():  # after the warm-up, the encoder has not moved
        torch.testing.assert_close(warmed[f"encoder.bert.{name}"], tensor, rtol=0, atol=0)
    guard = json.loads((output / "guard.json").read_text())
    scores = {c["name"]: c["ndcg@10"] for c in guard["candidates"]}
    assert list(scores) == ["base", "step 2", "step 4"] and scores["step 2"] == scores["base"]
    best = max(guard["candidates"], key=lambda c: c["ndcg@10"])
    assert guard["chosen"] in ("base", best["name"])
    for folder in ("encoder", "training/encoder"):  # the winner, and the training stage's last step
        exported = json.loads((output / folder / "retromae_encoder.json").read_text())
        assert (exported["pooling"], exported["normalize"]) == ("mean", True)
    modules = json.loads((output / "sentence-transformer" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize"]


def test_decoding_is_an_option_of_the_retromae_objectives_only(tmp_path, declared_base):
    with pytest.raises(ConfigError, match="decoding.*only with --objective retromae or retromae\\+contrastive"):
        tiny_adapt(declared_base, tmp_path / "c.jsonl", tmp_path / "out", decoding="basic")


def test_no_note_of_a_missing_mlm_head_for_an_objective_that_never_uses_one(tmp_path, headless_base, caplog):
    adapt(tiny_adapt(headless_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", max_steps=2))
    notes = [record.getMessage() for record in caplog.records if record.name.startswith("retromae")]
    assert not [note for note in notes if "masked-LM head" in note]  # cropping trains no MLM head
    adapt(tiny_adapt(headless_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "tsdae", max_steps=2,
                     objective="tsdae"))
    notes = [record.getMessage() for record in caplog.records if record.name.startswith("retromae")]
    assert [note for note in notes if "has no masked-LM head" in note]  # tsdae trains a fresh one: said once


def test_the_guard_kinds_recipe_rescores_a_keyword_run_on_passages_of_its_held_out_documents(tmp_path, declared_base):
    import importlib.util

    path = Path(__file__).parents[1] / "recipes" / "guard_kinds.py"
    spec = importlib.util.spec_from_file_location("guard_kinds", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out"))  # keywords
    validation = recipe.passage_set(output / "validation")
    keyword_set = json.loads((output / "validation" / "queries.jsonl").read_text().splitlines()[0])
    assert validation.queries and keyword_set["_id"] in validation.queries
    for query_id, relevant in validation.qrels.items():
        (doc_id,) = relevant
        assert validation.queries[query_id] not in validation.corpus[doc_id].text  # taken out of its target
    result = recipe.estimate(output, str(declared_base))
    low, high = result["passage_interval"]
    assert result["passage_gain"] == pytest.approx(result["passage_export"] - result["passage_base"])
    assert low <= result["passage_gain"] <= high and result["passage_queries"] == len(validation.queries)


def test_the_guard_signals_recipe_makes_its_held_out_query_kinds_from_the_validation_set():
    import importlib.util

    from retromae.data.retrieval_sets import Passage, RetrievalSet

    path = Path(__file__).parents[1] / "recipes" / "guard_signals.py"
    spec = importlib.util.spec_from_file_location("guard_signals", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    corpus = {"d0": Passage("", "reactors cool their cores with heavy water pumped through steel pipes"),
              "d1": Passage("", "glaciers carve valleys as they slide over bedrock for centuries")}
    validation = RetrievalSet(corpus, {"q0": "pumped water keeps fission stable under pressure"}, {"q0": {"d0": 1}})
    assert recipe.unshared_queries(validation) == {"q0": "keeps fission stable under pressure"}  # shared words out
    keywords = recipe.keyword_queries(validation)
    assert set(keywords) == {"q0"} and set(keywords["q0"].split()) <= set(corpus["d0"].text.split())


def test_the_guard_estimates_recipe_reads_a_share_by_the_real_base_and_fits_leaving_a_collection_out():
    import importlib.util

    path = Path(__file__).parents[1] / "recipes" / "guard_estimates.py"
    spec = importlib.util.spec_from_file_location("guard_estimates", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)

    def record(collection, held_out, real):  # every query alike: each interval is its point
        ids = [f"q{i}" for i in range(5)]
        return {"run": f"runs/{collection}/distill-s1", "collection": collection, "guard": {"chosen": "step 4"},
                "held_out": {"passage": {"base": dict.fromkeys(ids, held_out[0]),
                                         "export": dict.fromkeys(ids, held_out[1])}},
                "real": {"base": dict.fromkeys(ids, real[0]), "export": dict.fromkeys(ids, real[1])}}

    rows = [recipe.run_row(record("a", (0.2, 0.22), (0.5, 0.53))),  # held-out +10%, real +6%
            recipe.run_row(record("b", (0.5, 0.55), (0.4, 0.42)))]  # held-out +10%, real +5%
    recipe.fitted(rows, "share")
    assert rows[0]["points"][0] == pytest.approx(0.02) and rows[0]["points"][1] == pytest.approx((0.02, 0.02))
    assert rows[0]["share"][0] == pytest.approx(0.05)  # +10% of the real base's 0.5
    assert rows[0]["factors"]["share"] == pytest.approx(0.5)  # the other's real 0.02 on its estimated 0.04
    assert rows[1]["factors"]["share"] == pytest.approx(0.6)  # 0.03 on 0.05
    assert rows[0]["fitted share"][0] == pytest.approx(0.025)
    text = recipe.table(rows, ("points", "share", "fitted share"))
    assert "| a | 1 | candidate | 0.200 → 0.500 | +0.0300 | +0.0200 [+0.0200, +0.0200] | -0.0100 |" in text
    assert "- share: mean absolute error 0.0200, mean signed +0.0200" in text  # +0.05 − 0.03, +0.04 − 0.02


def test_the_labelled_guard_recipe_scores_drawn_queries_against_the_rest_or_another_split(tmp_path):
    import importlib.util

    path = Path(__file__).parents[1] / "recipes" / "labelled_guard.py"
    spec = importlib.util.spec_from_file_location("labelled_guard", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    for name, score in (("base", 0.5), ("candidate", 0.75)):
        systems = {"m": {f"q{i}": {"ndcg@10": score} for i in range(20)}, "BM25": {}, "m+BM25": {}}
        (tmp_path / name).mkdir()
        (tmp_path / name / "per-query.json").write_text(json.dumps({"set": systems}))
    base, candidate = recipe.per_query(tmp_path / "base"), recipe.per_query(tmp_path / "candidate")
    assert len(base) == 20 and set(candidate.values()) == {0.75}  # the model's, not BM25's nor the hybrid's
    assert recipe.sampled(base, candidate, None, 5) == ["5", "0.0000", "+0.0000", "100 of 100", "100 of 100"]
    # the user's gain on another split: +0.125, every draw's gain +0.25 above it and its interval a point
    assert recipe.sampled(base, candidate, 0.125, 5) == ["5", "0.1250", "+0.1250", "0 of 100", "0 of 100"]
