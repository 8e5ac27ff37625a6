"""Calibration over time: matured windows, champion scores, learned bands, and a champion/challenger gate.

Pure library (numpy/pandas and our calibrators; no Prefect, no DVC). A *frame* has the columns ``time``,
``score``, ``label`` and optionally segment columns. One call to ``process_window`` does a day's work for
one window, in this order, and returns a new ``MonitorState`` (JSON round-trip, never pickle):

1. **Score the champion** on the window, overall (segment ``all``) and per segment value: calibration ratio
   ``sum p / sum y`` with its exact interval from the counts (``intervals.ratio_interval``, the same on
   rows and on tables), ECE (equal-width bins), log loss and Brier. A (window, segment) that *expects*
   fewer than ``min_positives`` positives (the champion's ``sum p``, and the segment's mean positives over
   its previous windows) is *skipped with a note* instead of judged (``scoring.unjudged``): never on the
   window's own positives, which would judge a small segment on its luckiest days only. When the overall
   window is skipped no gate runs either.
2. **Bands** (the alert thresholds) are learned per (segment, metric) from the champion's *reference
   windows*: the first ``reference_windows`` windows it scored after it took office that were not judged
   drifted (a window out of band, or inside an open incident, never enters a reference). Rule: a
   prediction interval for one new value, ``mean +- q * sd * sqrt(1 + 1/n)`` with ``q`` the Student-t
   quantile (n - 1 degrees of freedom) at the normal tail of ``band_k`` sd, split over the S segments
   watched in the window (Bonferroni: S bands are judged at once): ten reference values give the nominal
   rate, not the several-fold excess of a plain 3-sd band on a noisy sd. The ratio's ``sd`` is never less
   than the reference windows' own standard error (``ratio_spread``). The ratio is two-sided;
   ECE is upper only and learned on log(ECE) (ECE is skewed and bounded below by its noise). Always on as
   well: the user's hard limits (``floor_ratio``, judged on the ratio's interval: out when it lies wholly
   past the floor; ``floor_ece``) and the *practical* limit: the ratio is
   beyond ``1 +- practical_ratio`` by more than ``z`` standard errors (delta method over rows), ``z`` the
   normal quantile at the band's own tail (``band_k`` sd split over the S segments). (A 95% interval
   here paged on 3-sd Poisson swings of 100-positive segments: 0.7 incidents per 100 stable windows.)
   A value out on ``patience`` consecutive scored windows raises an alert.
3. **Incidents** (what a person is paged for): the first alert on a (segment, metric) opens an incident;
   it stays open until the metric is back in band for ``recovery`` consecutive scored windows; an alert
   within ``cooldown`` windows of a close reopens that incident instead of opening a new one. Incidents
   are derived from the history (``incidents``), so a rescored history gives the same incidents.
4. **The gate.** Each challenger method is fitted on the trailing calibration window (the
   ``calib_windows`` periods just before the window) and scored beside the champion on this, the newest
   held-out window. The best challenger by the selection metric (log loss or Brier: proper scores,
   per-row additive, so the paired bootstrap resamples per-row differences) is compared with the champion by
   a paired bootstrap of ``metric(champion) - metric(challenger)``; the interval level is
   Bonferroni-adjusted for the number of challengers (``1 - (1 - ci_level) / m``) because the best of m is
   picked on the same window. It is promoted only if the whole interval is above zero, the mean gain is at
   least ``min_gain`` of the champion's loss (a practical gain, not a 1e-5 one), the challenger keeps the
   ranking (its class declares ``monotone`` and its predictions are non-decreasing on the sorted scores of
   both windows) and no rollback pins the champion.

**One scale.** The frame's ``score`` column is the user's own score on the source's ``score_kind`` scale
(probability, logit or score). Every prediction goes through ``calibflow.sources.calibrate_scores`` (the
one conversion select and ``apply`` use) and every challenger is fitted on the champion's declared input
converted from that scale, then records ``score_kind`` in its JSON.

The history is keyed by (window start, segment): ``process_window`` refuses a window already processed,
so a resumed run never double-counts one, and ``pending_windows`` lists exactly the matured windows not yet
in the state, so none is lost. ``truncate`` drops everything from a window on (a late or re-delivered day:
the history and the gate are recomputed from there); versions promoted from then on are kept, marked
withdrawn, and their numbers are never reused. Windows sit on a fixed grid (``origin`` + k * ``period``),
so deleting old files never moves it.

The package, one job per module: ``config`` (the settings), ``windows`` (the window grid), ``scoring`` (a
calibrator's scores on a window, with the bootstrap), ``challenger`` (challengers and the paired test),
``state`` (the JSON state), ``thresholds`` (bands and limits), ``alerts`` (alerts, incidents and waits),
``patch`` (the champion refitted on drifted segment levels only), ``gate`` (one window's step); and,
imported by the stage where it needs them, ``deliveries`` (a source's files and their windows), ``stream``
(a large window read by DuckDB) and ``scale`` (a large window's scores from one pass's tables).

This module is the package's face: the names the pipeline, the flows, the report and the experiments use.
No orchestration here or below (Prefect, DVC, Great Expectations, the flows, the command line, the
pipeline): tests/orchestration/test_layering.py.
"""

from __future__ import annotations

from calibflow.monitor.alerts import (  # noqa: I001
    WAIT_METRICS,
    incidents,
    update_waits,
    wait_incidents,
)
from calibflow.monitor.challenger import (  # noqa: I001
    challenge,
    fit_challenger,
    keeps_ranking,
    keeps_ranking_within,
)
from calibflow.monitor.config import (
    ALL,
    CHANGE_TOL,
    PATCH_METHOD,
    SELECTION_METRICS,
    WATCHED,
    MonitorConfig,
)
from calibflow.monitor.config import (  # noqa: I001
    _origin as grid_origin,
)
from calibflow.monitor.gate import (  # noqa: I001
    process_window,
)
from calibflow.monitor.patch import (  # noqa: I001
    drifted_rows,
    patch_challenger,
    patch_targets,
)
from calibflow.monitor.scoring import (  # noqa: I001
    bootstrap_ratio_ci,
    calibration_slope,
    ece_null,
    ece_nulls,
    per_row_loss,
    predict_frame,
    ratio_se,
    score,
    segment_masks,
    slope_fits,
)
from calibflow.monitor.state import (  # noqa: I001
    STATE_SCHEMA,
    MonitorState,
    history_frame,
    truncate,
)
from calibflow.monitor.thresholds import (  # noqa: I001
    REFERENCE_TOLERANCE,
    REFERENCE_Z,
    bands,
    ece_off,
    out_of_band,
    practically_off,
    ratio_spread,
    shown_calibrated,
    slope_off,
    within_limit,
)
from calibflow.monitor.windows import (  # noqa: I001
    Window,
    matured_windows,
    pending_windows,
    window_at,
    window_index,
    window_keys,
    window_of,
)

__all__ = [
    "ALL",
    "CHANGE_TOL",
    "MonitorConfig",
    "MonitorState",
    "PATCH_METHOD",
    "REFERENCE_TOLERANCE",
    "REFERENCE_Z",
    "SELECTION_METRICS",
    "STATE_SCHEMA",
    "WAIT_METRICS",
    "WATCHED",
    "Window",
    "bands",
    "bootstrap_ratio_ci",
    "calibration_slope",
    "challenge",
    "drifted_rows",
    "ece_null",
    "ece_nulls",
    "ece_off",
    "fit_challenger",
    "grid_origin",
    "history_frame",
    "incidents",
    "keeps_ranking",
    "keeps_ranking_within",
    "matured_windows",
    "out_of_band",
    "patch_challenger",
    "patch_targets",
    "pending_windows",
    "per_row_loss",
    "practically_off",
    "predict_frame",
    "process_window",
    "ratio_se",
    "score",
    "segment_masks",
    "ratio_spread",
    "shown_calibrated",
    "slope_fits",
    "slope_off",
    "truncate",
    "update_waits",
    "wait_incidents",
    "window_at",
    "window_index",
    "window_keys",
    "window_of",
    "within_limit",
]
