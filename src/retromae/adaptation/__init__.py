"""`retromae adapt`: unsupervised adaptation of an already-trained embedder to a corpus, guarded by validation.

Modules: `config` (the options, import-light), `queries` (pseudo-queries of any text: keywords, a sentence or a word
window, a passage taken out of its document; the guard's kind for each objective), `data` (the base's declared
similarity, the held-out split and its queries, the input checks),
`guard` (scoring the base, its checkpoints and their averages with the base on the validation set, the bootstrap
interval that decides), `distill` (the student trained on a teacher's scores: the BM25 + base hybrid or a
cross-encoder), `run` (the stages from end to end, the export, the model card and the verdict; `retromae.adapt(...)`
calls its `adapt`).
"""
