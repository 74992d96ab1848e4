"""What a person reads: the live terminal views, the report and the MLflow UI.

    live.py     the search's live table and `autospeed train`'s progress bar (rich)
    leaderboard.py  the trials ranked as a table and as CSV, and the cells the views share
    summaries.py    what each command prints when it ends (train, search, export, report, ...)
    report/     `autospeed report`: data read back, figures, one self-contained HTML page
    ui.py       `autospeed ui`: the MLflow UI on the tracking store, bound to 127.0.0.1
"""
