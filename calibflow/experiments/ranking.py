"""Reproduction of Kweon, Kang & Yu (AAAI 2022): calibrated probabilities from personalized ranking models.

Protocol (Experimental Setup and Appendix E of the paper, on Coat):

1. Interactions: ``Y_ui = 1`` if user u rated item i >= 4 in the MNAR training ratings, else 0 (unrated pairs
   are 0: implicit feedback).
2. Calibration set, the authors' released protocol (``split: released``, default; data/yahooR3.ipynb
   cell 6 and Utils/utils.py ``caldset`` of WonbinKweon/CalibratedRankingModels_AAAI2022): for every user
   with more than 4 positives the last ``max(round(0.1 n), 1)`` positives are held out; the calibration set
   is those positives plus ``num_neg`` negatives per positive drawn uniformly (with replacement) from the
   user's non-positive items (``num_neg=57`` in the release, main.py line 46). The rankers never see the
   held-out positives. ``split: stratified`` keeps our earlier reading (a stratified 10% of all pairs).
3. Base rankers (fitted on the other 90%): XGBoost ``rank:pairwise`` (one query per user) on user and item
   features, the two ids and the users' / items' interaction counts, and BPR matrix factorisation
   (eq. 24; numpy SGD).
4. Calibrators are fitted on the calibration pairs' scores and ``Y`` (naive, eq. 14) or with the UERM
   inverse-propensity loss and the item-popularity propensity omega = (count/max)^0.5 of the *training
   part* (held-out positives removed), clipped at 0.1 (main.py lines 43-44 and 52, cal_method.py lines 28
   and 56), or Coat's shipped learned propensities. ``uerm_weights: released`` (default) weights positives
   by 1/omega and negatives by 1 (cal_method.py lines 59-63); ``eq17`` is eq. (17) as printed.
5. Evaluation on the uniformly random test ratings: ``R_ui = 1`` if the rating is >= 4. ECE and MCE with M=15
   equal-width bins and NLL (Tables 1, 4, 5); NDCG@k and Recall@k of the rankers (Table 3).

Choices where the paper is open (also listed in the returned ``choices``):

- "Last" positives: the release keeps the file order (Yahoo!R3's Webscope train file, sorted by user then
  item); Coat ships a matrix, so the order is the item index. The split is therefore the same for every seed;
  seeds move the negatives, the rankers and the calibrators. ``held_out: random`` (the ``seeds`` profile)
  draws the held-out positives per seed instead, so a seed meta-run varies the split as well.
  Coat's learned propensities (P(rated)) are clipped at ``supplied_floor`` (default 0.01, so 1/w <= 100);
  the paper clips popularity only.
- Gamma's shift is ``s - s_min + 0.01 (s_max - s_min)`` of the calibration scores (see
  ``calibflow.calibrators.ranking``); both curves continue linearly outside the calibration range.
- Base models are ours (the paper's five are PyTorch models we do not reproduce): XGBoost ranker and BPR-MF.

This module re-exports the public names; the code lives in ``calibflow.experiments._ranking``, one module per
job: ``paper`` (the published numbers), ``data`` (loaders and splits), ``rankers`` (XGBoost and BPR-MF),
``protocol`` (configuration, fits, one replication), ``tables`` (tables, claims and figures), ``notes``
(choices and computed notes) and ``reproduction`` (``run``). It stays a module file because the reproduce
stage's dvc.yaml deps name ``calibflow/experiments/${item.key}.py`` for every paper.
"""

from __future__ import annotations

from calibflow.calibrators.ranking import popularity_propensity
from calibflow.experiments._ranking.data import (
    YAHOO_FILES,
    Ratings,
    Split,
    calibration_pairs,
    held_out_positives,
    load_coat,
    load_obd_clicks,
    load_yahoo_r3,
    make_split,
    released_split,
    sample_negatives,
    split_for,
)
from calibflow.experiments._ranking.notes import CHOICES, notes_for
from calibflow.experiments._ranking.paper import (
    PAPER,
    PAPER_COAT,
    PAPER_MODELS,
    PAPER_TABLE3_COAT,
    PAPER_TABLE3_YAHOO,
    PAPER_YAHOO,
)
from calibflow.experiments._ranking.protocol import (
    DEFAULTS,
    METHOD_PARAMS,
    METHODS,
    MODEL_LABELS,
    SWEEP_METHODS,
    _check_config,
    evaluate,
    fit_method,
    num_neg_sweep,
    propensities_for,
    random_baseline,
    rated_calibration,
    run_seed,
)
from calibflow.experiments._ranking.rankers import pair_features, ranking_metrics, train_bpr, train_xgb_ranker
from calibflow.experiments._ranking.reproduction import run
from calibflow.experiments._ranking.tables import (
    _paired_gain,
    _sweep_cell,
    claims,
    curves_figure,
    max_p_table,
    metric_table,
    obd_check,
    propensity_table,
    ranking_table,
    rated_table,
    reliability_figure,
    seed_claims,
    sweep_table,
)

__all__ = [
    "CHOICES",
    "DEFAULTS",
    "METHODS",
    "METHOD_PARAMS",
    "MODEL_LABELS",
    "PAPER",
    "PAPER_COAT",
    "PAPER_MODELS",
    "PAPER_TABLE3_COAT",
    "PAPER_TABLE3_YAHOO",
    "PAPER_YAHOO",
    "SWEEP_METHODS",
    "YAHOO_FILES",
    "Ratings",
    "Split",
    "_check_config",
    "_paired_gain",
    "_sweep_cell",
    "calibration_pairs",
    "claims",
    "curves_figure",
    "evaluate",
    "fit_method",
    "held_out_positives",
    "load_coat",
    "load_obd_clicks",
    "load_yahoo_r3",
    "make_split",
    "max_p_table",
    "metric_table",
    "notes_for",
    "num_neg_sweep",
    "obd_check",
    "pair_features",
    "popularity_propensity",
    "propensities_for",
    "propensity_table",
    "random_baseline",
    "ranking_metrics",
    "ranking_table",
    "rated_calibration",
    "rated_table",
    "released_split",
    "reliability_figure",
    "run",
    "run_seed",
    "sample_negatives",
    "seed_claims",
    "split_for",
    "sweep_table",
    "train_bpr",
    "train_xgb_ranker",
]
