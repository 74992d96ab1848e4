"""What a person reads: the live terminal views, the report and the MLflow UI.

    live.py     the search's live table and `autospeed train`'s progress bar (rich)
    report/     `autospeed report`: data read back, figures, one self-contained HTML page
    ui.py       `autospeed ui`: the MLflow UI on the tracking store, bound to 127.0.0.1
"""
