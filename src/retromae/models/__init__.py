"""Models in and out: what a `--model` names, loading it, encoding with it, and exporting what training made.

Owns: `model_source` (the one resolver of `--model`: run folders, our export, sentence-transformers and Hugging Face
folders, hub names; a random initialisation's marker), `pretrained` (the one place transformers reads a folder:
safetensors only, no remote code), `masked_lm` (a masked-LM backbone loaded for pre-training, the length checks every
command makes), `encoder` and `encoder_config` (`Encoder`: inference, pooling, normalising; the encoder options,
torch-free), `backends` (`--backend onnx|openvino`, `--quantize int8`: the exports made once per weights and the
runners of the forward pass), `export` (the encoder and sentence-transformers folders a run leaves), `model_card`
(their README), `tokenizer_training` (tokenizers trained from text), `finite` (no NaN leaves a model) and `onednn`
(prepacked float32 linears on the CPU). Does not own the families' particulars (`retromae.backbones`), training
(`retromae.training`) or search (`retromae.retrieval`).
"""
