"""A user's own training loop, searchable: the knob context it calls (context.py, `autospeed.init`) and the
search's preflight that checks the script reads every searched knob (preflight.py). The process that runs a
script as a training run is autospeed.train.script_run."""
