"""A user's own training loop, searchable: the knob context it calls (context.py, `autospeed.init`: building the
run; stepping.py: micro-batches from any source, backward, clipping, the step; reporting.py: the clock, `report`
and the run's result) and the search's preflight (preflight.py), which reads the script's own defaults (the base
of every run) and checks it reads every searched knob. The process that runs a script as a training run is
autospeed.train.script_run."""
