"""Training one recipe, torch only (no Ray, Optuna or MLflow): what `autospeed train` runs and
what every trial runs inside Ray.

    trainer.py      train(): the hot loop, out-of-memory retries
    step.py         one step's knobs (clock, autocast, attention, scaler, accumulation), shared with scripts
    setup.py        device, backend knobs, model with its knobs (compile, channels_last, DDP), loss
    evaluate.py     evaluation off the clock (rank 0 under data parallelism)
    result.py       EvalEvent (one per evaluation) and TrainResult (the result object)
    applied.py      the `applied` record: every field of what acted, named once; the knobs that did not act
    run_record.py   one run's bookkeeping (steps, first step, evaluations, TTA, status, result), shared with scripts
    data.py         batches: device-resident tensors or a DataLoader
    batch.py        effective batch, micro-batches, the LR rule
    optimizers.py   optimizers (sgd, adamw, muon; impl) and LR schedules
    distributed.py  torch.distributed replicas (DDP) for data-parallel runs
    environment.py  what a number was measured on; peak memory
    process.py      training in a fresh process (confirmation's production-like runs)
"""
