"""`gpt`: a GPT the size of nanoGPT's small configs, trained on BPE tokens of a text corpus.

The corpus is the Python standard library's source (on every machine, so it runs offline; ~14 MB,
about 4M tokens) or the user's `corpus_path`: one UTF-8 text file, or a folder whose text files are
read in sorted order (hidden files and folders skipped). The last `val_fraction` of it (cut at a line
end) is the validation split.

The tokenizer is a sentencepiece BPE vocabulary of `vocab_size` tokens, trained in memory on the
training split with settings that keep code as it is: no normalisation, every space kept,
whitespace-only tokens allowed, no dummy prefix, and unseen characters as UTF-8 byte tokens, so
decoding the ids gives back the exact text. The text goes to sentencepiece in chunks of whole lines
(so newlines sit inside its "sentences" and can join tokens like `):\\n`), and the same chunks are
encoded. The ids (uint16) and the tokenizer model are cached on disk per set of options.

The model is `lm`'s GPT (autospeed.workloads._lm) with a `vocab_size` embedding and head. Metrics are
per token (`val_loss` in nats per token, `val_perplexity`, next-token `val_accuracy`), plus
`val_bits_per_byte`: the loss in bits per byte of validation text, comparable across vocabularies
and with `lm` (whose nats per byte / ln 2 is the same unit).
"""

from __future__ import annotations

import io
import math
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from autospeed.errors import UserError
from autospeed.workloads._cache import cached_arrays
from autospeed.workloads._lm import GPT, _windows, check_options, evaluate_tokens, next_token_loss, stdlib_source
from autospeed.workloads.base import Metric, Workload

GPT_METRICS = {
    "val_loss": Metric("min", 0.0),  # nats per token
    "val_perplexity": Metric("min", 1.0),  # exp(val_loss)
    "val_accuracy": Metric("max", 0.0, 1.0),  # next-token top-1
    "val_bits_per_byte": Metric("min", 0.0),  # val_loss / ln 2 / (validation bytes per token)
}
MIN_CORPUS_BYTES = 10_000
CHUNK_CHARS = 4096  # text per sentencepiece "sentence": whole lines up to this many characters
EVAL_TOKENS = 65_536  # tokens per evaluation batch: the fp32 logits of one batch are EVAL_TOKENS x vocab


def train_flops_per_sample(model: GPT) -> float:
    """Model FLOPs of training on one sample (forward and backward) of `model.context` tokens, counted
    as nanoGPT's `estimate_mfu` (after PaLM, appendix B) does: per token 6 N + 12 L H Q T, where N is
    the parameter count without the position embedding (the tied head counted once), L the depth, H
    the heads, Q the head width (H Q = the model width) and T the context. 6 N is the matmuls'
    multiply-adds forward (2 N) and backward (4 N); 12 L H Q T is attention's QK^T and AV over the full
    context, causal masking not subtracted."""
    n = sum(p.numel() for p in model.parameters()) - model.pos.weight.numel()
    depth, width, t = len(model.checkpoint_blocks), model.pos.embedding_dim, model.context
    return float((6 * n + 12 * depth * width * t) * t)


def corpus_text(corpus_path: str | None, corpus_bytes: int) -> str:
    """The first `corpus_bytes` bytes (0: all) of the corpus as text: the standard library's .py files,
    or the file or folder at `corpus_path`."""
    limit = corpus_bytes or sys.maxsize
    if corpus_path is None:
        corpus, _ = stdlib_source(limit)
        return corpus.tobytes().decode("utf-8", errors="ignore")  # `ignore`: a character cut at the end
    texts, total = [], 0
    for path in _corpus_files(Path(corpus_path).expanduser()):
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise UserError(f"workload_options.corpus_path: {path} is not UTF-8 text ({e.reason} at byte "
                            f"{e.start}); convert it to UTF-8 or remove it from the corpus") from None
        total += len(texts[-1].encode())
        if total >= limit:
            break
    return "".join(texts).encode()[:limit].decode("utf-8", errors="ignore")


def _corpus_files(root: Path) -> list[Path]:
    """The file itself, or every file under the folder (sorted, hidden ones skipped)."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise UserError(f"workload_options.corpus_path: {root} does not exist; give a UTF-8 text file or a "
                        f"folder of them (or leave corpus_path out for the standard library's source)")
    files = sorted(p for p in root.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        raise UserError(f"workload_options.corpus_path: the folder {root} holds no files; put the corpus's "
                        f"text files in it")
    return files


def _corpus_key(corpus_path: str | None) -> object:
    """What identifies the corpus in the cache key: the Python version for the standard library (its
    source changes between versions); each file's path, size and modification time for the user's."""
    if corpus_path is None:
        return {"stdlib": list(sys.version_info[:2])}
    root = Path(corpus_path).expanduser().resolve()
    return {"path": str(root), "files": [[str(p), p.stat().st_size, p.stat().st_mtime_ns]
                                         for p in _corpus_files(root)]}


def _chunks(text: str) -> Iterator[str]:
    """Consecutive pieces of `text` of whole lines, each at most CHUNK_CHARS characters (a longer line is cut)."""
    start = 0
    while start < len(text):
        end = text.rfind("\n", start, start + CHUNK_CHARS) + 1
        if end <= start:
            end = min(start + CHUNK_CHARS, len(text))
        yield text[start:end]
        start = end


def train_tokenizer(text: str, vocab_size: int) -> bytes:
    """A sentencepiece BPE model (its serialised bytes) of `vocab_size` tokens trained on `text`."""
    import sentencepiece as spm

    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_chunks(text), model_writer=model, model_type="bpe", vocab_size=vocab_size,
            normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=False,
            allow_whitespace_only_pieces=True, byte_fallback=True, character_coverage=1.0, split_digits=True,
            bos_id=-1, eos_id=-1, max_sentence_length=4 * CHUNK_CHARS,  # bytes: a UTF-8 character has <= 4
            minloglevel=2, num_threads=os.cpu_count() or 1)
    except RuntimeError as e:  # e.g. "Vocabulary size too high (65535). Please set it to a value <= 15013."
        raise UserError(f"workload_options.vocab_size: sentencepiece cannot make {vocab_size} tokens of this "
                        f"corpus: {str(e).split('] ', 1)[-1]}") from None
    return model.getvalue()


def tokenizer(model: np.ndarray):
    """The sentencepiece processor of a cached tokenizer model (`tokenized_corpus(...)["tokenizer"]`)."""
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_proto=np.asarray(model).tobytes())


def _encode(processor, text: str, dtype: type) -> np.ndarray:
    pieces = processor.encode(list(_chunks(text)), num_threads=os.cpu_count() or 1)
    return np.concatenate([np.asarray(ids, dtype=dtype) for ids in pieces] or [np.zeros(0, dtype)])


def tokenized_corpus(corpus_path: str | None, corpus_bytes: int, vocab_size: int,
                     val_fraction: float) -> dict[str, np.ndarray]:
    """The corpus as token ids, cached: `train` and `val` ids (uint16 where the vocabulary fits), the
    `tokenizer` model's bytes (uint8) and `val_bytes`, the validation text's length in UTF-8 bytes."""
    import sentencepiece as spm

    def build() -> dict[str, np.ndarray]:
        text = corpus_text(corpus_path, corpus_bytes)
        if len(text.encode()) < MIN_CORPUS_BYTES:
            where = corpus_path or f"the standard library under {sysconfig.get_paths()['stdlib']}"
            raise UserError(f"workload_options.corpus_path: {where} holds only {len(text.encode())} bytes of text; "
                            f"gpt needs at least {MIN_CORPUS_BYTES}; give a larger corpus as corpus_path")
        cut = int(len(text) * (1 - val_fraction))
        split = text.rfind("\n", 0, cut) + 1 or cut  # at a line end where there is one
        train_text, val_text = text[:split], text[split:]
        model = train_tokenizer(train_text, vocab_size)
        processor = spm.SentencePieceProcessor(model_proto=model)
        dtype = np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32
        return {"train": _encode(processor, train_text, dtype), "val": _encode(processor, val_text, dtype),
                "tokenizer": np.frombuffer(model, dtype=np.uint8),
                "val_bytes": np.array([len(val_text.encode())], dtype=np.int64)}

    key = {"corpus": _corpus_key(corpus_path), "corpus_bytes": corpus_bytes, "vocab_size": vocab_size,
           "val_fraction": val_fraction, "sentencepiece": spm.__version__}
    return cached_arrays("gpt", key, build)


def gpt(width: int = 768, depth: int = 12, heads: int = 12, context: int = 1024, vocab_size: int = 8192,
        corpus_path: str | None = None, corpus_bytes: int = 0, val_fraction: float = 0.1) -> Workload:
    """GPT (91M parameters: width 768, depth 12, context 1024) on BPE tokens of the Python standard library
    or your corpus_path.

    Targets: val_loss (nats per token, min) or val_bits_per_byte (min). The 91M parameters are nanoGPT's count
    (the position embedding left out) at the defaults, with the tied 8192-token embedding."""
    check_options("gpt", {"width": (width, 8), "depth": (depth, 1), "heads": (heads, 1), "context": (context, 2),
                          "vocab_size": (vocab_size, 512)}, width, heads, val_fraction)
    if corpus_bytes != 0 and corpus_bytes < MIN_CORPUS_BYTES:
        raise UserError(f"workload_options.corpus_bytes: gpt needs 0 (the whole corpus) or at least "
                        f"{MIN_CORPUS_BYTES}, got {corpus_bytes}")

    data = tokenized_corpus(corpus_path, corpus_bytes, vocab_size, val_fraction)
    (tx, ty), (vx, vy) = _windows(data["train"], context), _windows(data["val"], context)
    if len(tx) == 0 or len(vx) == 0:
        raise UserError(f"workload_options.context: {context} tokens is longer than the corpus split "
                        f"({len(data['val'])} validation tokens); lower context or give more text")
    bytes_per_token = float(data["val_bytes"][0]) / len(data["val"])

    def evaluate(model: torch.nn.Module, batches) -> dict[str, float]:
        metrics = evaluate_tokens(model, batches)
        return {**metrics, "val_bits_per_byte": metrics["val_loss"] / math.log(2) / bytes_per_token}

    with torch.device("meta"):  # the shape alone, no memory
        flops = train_flops_per_sample(GPT(width, depth, heads, context, vocab_size))
    return Workload(
        name="gpt", train_x=tx, train_y=ty, val_x=vx, val_y=vy,
        build_model=lambda: GPT(width, depth, heads, context, vocab_size),
        loss=next_token_loss, evaluate=evaluate, metrics=dict(GPT_METRICS),
        eval_batch_size=max(1, EVAL_TOKENS // context),
        tokens_per_sample=context, train_flops_per_sample=flops,
    )
