"""What a search leaves behind in MLflow, and reading it back.

    layout.py   tag and metric names (defined once, shared by writers and readers), the MLflow
                client's connection and writers
    runs.py     a search read back: trial rows, leaderboard, speed-up
    export.py   best.yaml from the best trial, with its measured speed-up
"""
