WITH r0 AS (
  SELECT
    country AS seg_0,
    CAST(p AS DOUBLE) AS s,
    CAST(y AS DOUBLE) AS y,
    CAST(1 AS DOUBLE) AS w,
    LN(GREATEST(LEAST(s, 1 - 1e-12), 1e-12)) AS lp,
    LN(1 - GREATEST(LEAST(s, 1 - 1e-12), 1e-12)) AS l1p
  FROM analytics.events
), r1 AS (
  SELECT
    *,
    (
      lp - l1p
    ) AS z,
    s AS q,
    CASE
      WHEN COALESCE(NOT y IN (0, 1), TRUE)
      THEN 1
      WHEN COALESCE(NOT (
        s BETWEEN 0 AND 1
      ), TRUE)
      THEN 2
      ELSE 0
    END AS bad
  FROM r0
), r2 AS (
  SELECT
    *,
    CASE
      WHEN s BETWEEN 1e-12 AND 1 - 1e-12
      THEN CASE WHEN y = 1 THEN -lp ELSE -l1p END
      ELSE CASE
        WHEN y = 1
        THEN -LN(GREATEST(LEAST(q, 1 - 1e-15), 1e-15))
        ELSE -LN(1 - GREATEST(LEAST(q, 1 - 1e-15), 1e-15))
      END
    END AS ll,
    CASE
      WHEN bad = 0
      THEN CAST(LEAST(GREATEST(FLOOR((
        LEAST(GREATEST(z, -16.0), 16.0) + 16.0
      ) * 2048.0), 0), 65535) AS INTEGER)
      ELSE 0
    END AS bucket,
    CASE WHEN bad = 0 THEN CAST(y AS INTEGER) ELSE -bad END AS label
  FROM r1
), rows AS (
  SELECT
    *,
    CASE
      WHEN bucket < 32768
      THEN CASE WHEN bucket < 30518 THEN 0 ELSE 1 END
      ELSE CASE WHEN bucket < 35018 THEN 2 ELSE 3 END
    END AS cell_0
  FROM r2
)
SELECT
  '{"cells": [4], "ece_bins": 15, "kind": "probability", "label": "y", "n_buckets": 65536, "score": "p", "segments": ["country"], "weight": null, "z_max": 16.0}' AS spec,
  t.*
FROM (
  SELECT
    CAST(NULL AS VARCHAR) AS segment,
    CAST(NULL AS VARCHAR) AS value,
    bucket,
    label,
    COUNT(*) AS rows,
    SUM(w) AS n,
    SUM(w * z) AS sum_z,
    SUM(w * q) AS sum_q,
    SUM(w * ll) AS sum_ll,
    SUM(w * q * q) AS sum_q2
  FROM rows
  GROUP BY
    bucket,
    label
  UNION ALL
  SELECT
    'country' AS segment,
    CAST(seg_0 AS VARCHAR) AS value,
    cell_0 AS bucket,
    label,
    COUNT(*) AS rows,
    SUM(w) AS n,
    SUM(w * z) AS sum_z,
    SUM(w * q) AS sum_q,
    SUM(w * ll) AS sum_ll,
    SUM(w * q * q) AS sum_q2
  FROM rows
  GROUP BY
    seg_0,
    cell_0,
    label
) AS t
