"""calibflow: turn a model's raw scores into probabilities you can bid, target and decide on.

The library is pure numpy/scipy/scikit-learn/xgboost. It never imports the orchestration stack
(Prefect, DVC, Great Expectations) and never reads ``params.yaml``: callers pass arguments.
"""

__version__ = "0.1.0"
