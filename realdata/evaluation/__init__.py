"""Evaluating representations: features, NCM, linear probe, kNN, Recall@k, per-epoch collapse metrics.

* :mod:`realdata.evaluation.features` -- feature extraction, NCM, ``evaluate_frozen``;
* :mod:`realdata.evaluation.probe`, :mod:`realdata.evaluation.knn` -- linear probe; kNN, R@k;
* :mod:`realdata.evaluation.metrics` -- the per-epoch metric row of a training run.
"""
