"""Data-parallel training across processes: one recipe on N workers, started for whoever trains it (docs/design.md
"Scale-out").

    launch.py  the built-in trainer on N Ray Train workers (TorchTrainer): a search's data-parallel trial (its
               driver, search/trainable.py), a confirmation run and `autospeed train` alike

Inside each worker the trainer joins the process group Ray Train made (autospeed.train.distributed); a user's
script starts its own N processes torchrun-style instead (autospeed.script.runner), so it never comes here.
Nothing here imports the search: `autospeed train` of a `workers: N` recipe needs Ray Train and torch only.
"""
