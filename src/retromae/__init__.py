"""retromae: pre-train retrieval-oriented encoders (RetroMAE and peers), fine-tune, index, search, evaluate."""

__version__ = "0.1.0"
