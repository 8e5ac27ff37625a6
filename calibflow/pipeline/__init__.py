"""The pipeline's stages, one module per step, each a plain CLI: ``python -m calibflow.pipeline.<step>``;
their names, inputs, outputs and params are declared once in ``calibflow.pipeline.dag``.

``dvc.yaml`` runs them; the Prefect flows call their ``main(argv)`` or ``run(...)`` directly. Great
Expectations lives here (``calibflow.pipeline.validate``), never in the ``calibflow`` library.
"""
