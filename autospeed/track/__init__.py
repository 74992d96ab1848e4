"""What a search leaves behind in MLflow, and reading it back.

    names.py    tag and metric names (defined once, shared by writers and readers)
    store.py    the tracking store: its URI, a client checked to answer, SQLite's races
    writers.py  what a run logs: params, metrics, tags, a run ended or marked killed
    runs.py     a search read back: trial rows ranked, speed-up (their text: show/leaderboard.py)
    export.py   best.yaml from the best trial, with its measured speed-up
"""
