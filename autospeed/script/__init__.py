"""A user's own training loop, searchable: both ends of it in one package (docs/design.md "User scripts").

The script's end: the knob context it calls (context.py, `autospeed.init`: building the run; stepping.py:
micro-batches from any source, backward, clipping, the step; reporting.py: the clock, `report` and the run's
result; knob_view.py: `ctx.config`, every knob read recorded; process.py: the script process's ties to autospeed).
The runner's end: runner.py (the script's processes as one training run, its evaluations relayed to `on_eval`),
channel.py (the line protocol between the two, every environment variable of it), options.py (`workload: script`
and its options). And the search's preflight (preflight.py), which reads the script's own defaults (the base of
every run) and checks it reads every searched knob.
"""
