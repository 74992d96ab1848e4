"""gpt: BPE tokens of the standard library (or a user's corpus), deterministic and lossless; the GPT trains
to a loss target on CPU; its FLOPs per sample as nanoGPT counts them; bad options are clear."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from autospeed.errors import UserError
from autospeed.workloads import CACHE_ENV, load_workload
from autospeed.workloads._gpt import GPT, corpus_text, tokenized_corpus, tokenizer, train_flops_per_sample

TINY = {"width": 32, "depth": 2, "heads": 2, "context": 32, "vocab_size": 512, "corpus_bytes": 300_000}


def decoded(data: dict[str, np.ndarray]) -> str:
    """The training and validation ids decoded with the cached tokenizer."""
    return tokenizer(data["tokenizer"]).decode(np.concatenate([data["train"], data["val"]]).tolist())


def test_token_ids_are_deterministic_cached_and_decode_back_to_the_standard_library(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "first"))
    first = tokenized_corpus(None, 300_000, 512, 0.1)
    workload = load_workload("gpt", TINY)  # the same data: read from the cache, not tokenized again
    assert len(list((tmp_path / "first").iterdir())) == 1
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "second"))
    second = tokenized_corpus(None, 300_000, 512, 0.1)  # tokenized again, from scratch

    for name in ("train", "val", "tokenizer", "val_bytes"):
        assert np.array_equal(first[name], second[name]), f"{name} differs between two builds"
    assert first["train"].dtype == np.uint16 and int(first["train"].max()) < 512
    text = corpus_text(None, 300_000)
    assert decoded(first) == text, "decoding the ids gives back the text, every space and newline"
    assert 2.0 < len(text.encode()) / (len(first["train"]) + len(first["val"])) < 5, "bytes per token"
    assert torch.equal(workload.train_x[0, 1:], workload.train_y[0, :-1]), "targets are the next tokens"
    assert text.startswith(tokenizer(first["tokenizer"]).decode(workload.train_x[0].tolist()))


def test_an_untrained_gpt_guesses_uniformly_and_bits_per_byte_is_its_loss_per_validation_byte():
    workload = load_workload("gpt", TINY)
    data = tokenized_corpus(None, 300_000, 512, 0.1)
    model = workload.build_model().eval()
    assert model.head.weight is model.tok.weight and model.tok.num_embeddings == 512

    metrics = workload.evaluate(model, [(workload.val_x[:8], workload.val_y[:8])])
    assert set(metrics) == set(workload.metrics) == {"val_loss", "val_perplexity", "val_accuracy",
                                                     "val_bits_per_byte"}
    assert metrics["val_loss"] == pytest.approx(math.log(512), abs=0.2)
    bytes_per_token = float(data["val_bytes"][0]) / len(data["val"])
    assert metrics["val_bits_per_byte"] == pytest.approx(metrics["val_loss"] / math.log(2) / bytes_per_token)


def test_gpt_trains_to_a_val_loss_target_on_cpu():
    from autospeed.recipe import Recipe
    from autospeed.train.trainer import train

    target = {"metric": "val_loss", "mode": "min", "value": 4.2}  # nats per token; untrained: ln 512 = 6.24
    result = train(Recipe(workload="gpt", workload_options=TINY, optimizer="adamw", lr=0.003, batch_size=16,
                          epochs=2, eval_every_epochs=0.25, weight_decay=0.0, target=target))

    assert result.error is None and result.status == "reached", (result.status, result.best_value)
    assert result.best_value <= 4.2 and result.tta_seconds is not None


@pytest.mark.parametrize("as_folder", [False, True])
def test_a_corpus_path_file_or_folder_is_the_corpus(tmp_path, monkeypatch, as_folder):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    text = corpus_text(None, 60_000)
    half = text.index("\n", len(text) // 2) + 1
    if as_folder:
        corpus = tmp_path / "corpus"
        (corpus / "sub").mkdir(parents=True)
        (corpus / "b.txt").write_text(text[:half])  # sorted by path: b.txt before sub/a.txt
        (corpus / "sub" / "a.txt").write_text(text[half:])
        (corpus / ".notes").write_text("hidden files are not corpus\n" * 100)
    else:
        corpus = tmp_path / "corpus.txt"
        corpus.write_text(text)

    workload = load_workload("gpt", {**TINY, "corpus_bytes": 0, "corpus_path": str(corpus)})
    data = tokenized_corpus(str(corpus), 0, 512, 0.1)
    assert decoded(data) == text, "the files in sorted order, hidden ones left out"
    assert text.startswith(tokenizer(data["tokenizer"]).decode(workload.train_x[0].tolist()))


def test_a_missing_corpus_path_names_the_option_and_the_path(tmp_path):
    missing = tmp_path / "no-corpus-here"
    with pytest.raises(UserError, match=f"workload_options.corpus_path: {missing} does not exist"):
        load_workload("gpt", {**TINY, "corpus_path": str(missing)})


@pytest.mark.parametrize("options, key", [
    ({"width": 30, "heads": 4}, "workload_options.heads: width"),
    ({"vocab_size": 100}, "workload_options.vocab_size: gpt needs vocab_size >= 512"),
    ({"vocab_size": 60_000}, "workload_options.vocab_size: sentencepiece cannot make 60000 tokens"),
    ({"corpus_bytes": 5}, "workload_options.corpus_bytes"),
    ({"val_fraction": 0.7}, "workload_options.val_fraction"),
])
def test_bad_options_name_the_key(options, key):
    with pytest.raises(UserError, match=key):
        load_workload("gpt", {**TINY, **options})


def test_train_flops_per_sample_is_nanogpts_count():
    workload = load_workload("gpt", TINY)
    # By hand for width 32, depth 2, context 32, 512 tokens. Parameters without the position embedding:
    # token embedding (the tied head) 512 x 32; per block qkv 3 x 32 x 32, proj 32 x 32, fc and fc_out
    # 2 x 4 x 32 x 32, two LayerNorms 2 x 2 x 32; the final LayerNorm 2 x 32.
    n = 512 * 32 + 2 * (12 * 32 * 32 + 4 * 32) + 2 * 32
    assert n == 41_280
    per_token = 6 * n + 12 * 2 * 32 * 32  # 6 N + 12 L (H Q) T
    assert workload.train_flops_per_sample == per_token * 32 == 8_712_192
    assert workload.tokens_per_sample == 32


def test_autospeed_workloads_states_the_default_size(cli_in_process):
    done = cli_in_process("workloads")

    line = next(line for line in done.stdout.splitlines() if line.startswith("gpt "))
    with torch.device("meta"):
        default = GPT(768, 12, 12, 1024, 8192)
    parameters = sum(p.numel() for p in default.parameters()) - default.pos.weight.numel()
    assert f"GPT ({round(parameters / 1e6)}M parameters: width 768, depth 12, context 1024)" in line
    assert "val_bits_per_byte (min)" in line
    assert train_flops_per_sample(default) == pytest.approx(6.77e11, rel=0.01)
