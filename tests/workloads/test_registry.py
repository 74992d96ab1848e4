"""Workloads: built-ins build, mnist1d is cached on disk, plugins load, bad names are clear."""

from __future__ import annotations

import pytest
import torch

from autospeed.errors import UserError
from autospeed.workloads import BUILTIN, Workload, describe, load_workload


def test_the_builtins_are_described():
    assert [name for name, _ in describe()] == ["mnist1d", "digits", "cifar10", "synthetic", "lm", "resnet", "gpt"]
    assert all(line for _, line in describe())


def test_autospeed_workloads_lists_the_builtins_one_line_each(cli_in_process):
    done = cli_in_process("workloads")  # the command as a process is tests/test_cli.py's

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name in BUILTIN:
        assert sum(line.startswith(f"{name} ") for line in lines) == 1
    assert any("package.module:factory" in line for line in lines)


def test_mnist1d_is_generated_once_and_then_read_from_the_cache(dataset_cache):
    import numpy as np

    options = {"num_samples": 500, "seed": 7}  # a size no other test asks for
    before = set(dataset_cache.iterdir())
    first = load_workload("mnist1d", options)
    created = set(dataset_cache.iterdir()) - before
    assert len(created) == 1 and (next(iter(created)) / "manifest.json").exists()
    assert first.train_x.shape == (400, 1, 40) and first.val_x.shape == (100, 1, 40)
    assert first.build_model()(first.train_x[:8]).shape == (8, 10)

    # Mark the cached validation labels: a second load that regenerated the data would not see the mark.
    labels = next(iter(created)) / "y_val.npy"
    marked = np.load(labels)
    marked[:5] = (marked[:5] + 1) % 10
    np.save(labels, marked)
    second = load_workload("mnist1d", options)
    assert torch.equal(second.val_y[:5], torch.as_tensor(marked[:5]).to(second.val_y.dtype))
    assert not torch.equal(first.val_y[:5], second.val_y[:5])
    assert torch.equal(first.train_x, second.train_x)


def test_mnist1d_rejects_too_few_samples():
    with pytest.raises(UserError, match="workload_options.num_samples"):
        load_workload("mnist1d", {"num_samples": 10})


def test_digits_splits_train_and_validation():
    workload = load_workload("digits", {"val_fraction": 0.5})

    assert len(workload.train_x) + len(workload.val_x) == 1797
    assert workload.build_model()(workload.val_x[:4]).shape == (4, 10)


def test_synthetic_has_the_requested_shape_and_a_conv_model():
    workload = load_workload("synthetic", {"num_samples": 50, "image_size": 8, "channels": 3, "num_classes": 5})

    assert workload.images is True
    assert workload.train_x.shape == (50, 3, 8, 8)
    assert workload.build_model()(workload.train_x[:2]).shape == (2, 5)


def test_cifar10_without_data_names_the_folder(tmp_path):
    missing = tmp_path / "no-cifar-here"
    with pytest.raises(UserError) as info:
        load_workload("cifar10", {"data_dir": str(missing)})
    assert "workload_options.data_dir" in str(info.value)
    assert str(missing) in str(info.value)
    assert "cifar-10-batches-py" in str(info.value)


def test_cifar10_without_data_dir_says_to_set_it():
    with pytest.raises(UserError, match="workload_options.data_dir: cifar10 needs"):
        load_workload("cifar10")


def test_unknown_builtin_lists_the_choices():
    with pytest.raises(UserError, match="unknown workload 'mnist2d'; use one of mnist1d, digits"):
        load_workload("mnist2d")


def test_unknown_workload_option_lists_the_allowed_ones():
    with pytest.raises(UserError,
                       match="workload_options.hiddn: unknown option .* allowed: val_fraction, seed, hidden"):
        load_workload("digits", {"hiddn": 3})


def test_plugin_loads(write_plugin):
    write_plugin("tiny_plugin", """
        import torch
        from torch import nn
        from autospeed.workloads import Workload

        def tiny(n: int = 40):
            x, y = torch.randn(n, 3), torch.arange(n) % 2
            return Workload(name="tiny", train_x=x, train_y=y, val_x=x, val_y=y, num_classes=2,
                            build_model=lambda: nn.Linear(3, 2))
    """)

    workload = load_workload("tiny_plugin:tiny", {"n": 10})

    assert isinstance(workload, Workload) and workload.name == "tiny" and len(workload.train_x) == 10


def test_plugin_that_does_not_import_says_so():
    with pytest.raises(UserError, match="plugin module 'no_such_module_xyz' does not import"):
        load_workload("no_such_module_xyz:factory")


def test_plugin_without_the_factory_says_so(write_plugin):
    write_plugin("empty_plugin", "X = 1\n")
    with pytest.raises(UserError, match="'empty_plugin' has no callable 'factory'"):
        load_workload("empty_plugin:factory")


def test_plugin_returning_something_else_says_so(write_plugin):
    write_plugin("wrong_plugin", "def factory():\n    return 42\n")
    with pytest.raises(UserError, match="returned int, not an autospeed.workloads.Workload"):
        load_workload("wrong_plugin:factory")


# ---------------------------------------------------------------- lm
TINY_LM = {"width": 32, "depth": 1, "heads": 2, "context": 32, "corpus_bytes": 40_000}


def test_lm_is_the_standard_librarys_source_byte_level_cached_once(dataset_cache):
    import math
    import sysconfig
    from pathlib import Path

    before = set(dataset_cache.iterdir())
    workload = load_workload("lm", {**TINY_LM, "corpus_bytes": 41_000})  # a size no other test asks for
    created = set(dataset_cache.iterdir()) - before
    assert len(created) == 1, "the corpus is read once and cached"
    first_file = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))[0]
    assert first_file.read_bytes().startswith(bytes(workload.train_x[0].tolist())), "the corpus is stdlib source"
    assert torch.equal(workload.train_x[0, 1:], workload.train_y[0, :-1]), "targets are the next bytes"
    assert workload.train_x.shape[1] == 32 and workload.train_x.max() < 256
    assert (len(workload.train_x) + len(workload.val_x)) * 32 <= 41_000
    again = load_workload("lm", {**TINY_LM, "corpus_bytes": 41_000})
    assert set(dataset_cache.iterdir()) - before == created and torch.equal(again.val_x, workload.val_x)
    assert set(workload.metrics) == {"val_loss", "val_perplexity", "val_accuracy"}
    assert workload.metrics["val_loss"].mode == "min"

    model = workload.build_model()
    assert model.head.weight is model.tok.weight, "the head is tied to the embedding"
    metrics = workload.evaluate(model.eval(), [(workload.val_x[:8], workload.val_y[:8])])
    assert metrics["val_loss"] == pytest.approx(math.log(256), abs=0.2), "an untrained model guesses uniformly"
    assert metrics["val_perplexity"] == pytest.approx(math.exp(metrics["val_loss"]))


def test_lm_model_is_causal():
    workload = load_workload("lm", TINY_LM)
    model = workload.build_model().eval()
    x = workload.val_x[:2].clone()
    with torch.no_grad():
        before = model(x)
        x[:, -1] = (x[:, -1] + 1) % 256  # change the last byte: no earlier position may see it
        after = model(x)
    torch.testing.assert_close(before[:, :-1], after[:, :-1])
    assert not torch.allclose(before[:, -1], after[:, -1])


def lm_run(optimizer: str, epochs: float, capture: bool = False):
    """A run of the tiny LM; with `capture`, also each parameter's update (final - initial)."""
    from autospeed.recipe import Recipe
    from autospeed.train.trainer import train

    workload, initial, built = load_workload("lm", TINY_LM), {}, []
    build = workload.build_model

    def build_and_keep():
        built.append(build())
        initial.update({name: p.detach().clone() for name, p in built[-1].named_parameters()})
        return built[-1]

    workload.build_model = build_and_keep
    result = train(Recipe(workload="lm", workload_options=TINY_LM, optimizer=optimizer, lr=0.003, batch_size=16,
                          epochs=epochs, eval_every_epochs=epochs, weight_decay=0.0,
                          target={"metric": "val_loss", "mode": "min", "value": 0.1}), workload)
    return result, {name: p.detach() - initial[name] for name, p in built[-1].named_parameters()}


@pytest.fixture(scope="module")
def lm_one_step():
    """optimizer -> (result, updates) of one optimizer step (epochs 0.001 is one step of 16 sequences)."""
    return {optimizer: lm_run(optimizer, epochs=0.001) for optimizer in ("adamw", "muon")}


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_lm_learns_with_adamw_and_muon(optimizer, lm_one_step):
    result, _ = lm_run(optimizer, epochs=1)

    assert result.error is None and result.status == "not_reached"
    assert result.best_value < 4.0, "well below log(256) = 5.55 nats per byte after one epoch"
    assert result.applied["optimizer"] == optimizer
    # qkv, proj, fc and fc_out of the one block: (3 + 1 + 4 + 4) x width^2
    assert result.applied.get("muon_parameters", 0) == ((3 + 1 + 4 + 4) * 32 * 32 if optimizer == "muon" else 0)

    # Muon really updated the hidden weights: one step's update is orthogonalised (its top singular values
    # near-equal), unlike AdamW's; the embedding (tied head) is AdamW's in both, bit for bit.
    step, updates = lm_one_step[optimizer]
    assert step.error is None and step.steps == 1
    for name in ("qkv", "proj", "fc", "fc_out"):
        s = torch.linalg.svdvals(updates[f"checkpoint_blocks.0.{name}.weight"].double())
        near_equal = float(s[7] / s[0])  # the 8th largest over the largest
        assert near_equal > 0.75 if optimizer == "muon" else near_equal < 0.6, (name, near_equal)
    torch.testing.assert_close(lm_one_step["muon"][1]["tok.weight"], lm_one_step["adamw"][1]["tok.weight"],
                               rtol=0, atol=0)


def test_lm_rejects_a_width_its_heads_do_not_divide():
    with pytest.raises(UserError, match="workload_options.heads: width"):
        load_workload("lm", {"width": 30, "heads": 4})
