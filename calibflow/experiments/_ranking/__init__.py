"""The ranking reproduction's parts, one module per job; ``calibflow.experiments.ranking`` is its public face
(the reproduce stage loads ``calibflow/experiments/<key>.py``)."""
