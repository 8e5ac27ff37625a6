"""Paper reproductions. Each module exposes ``run(config: dict, seed: int) -> Reproduction``.

``config`` is the active profile's section of ``params.yaml`` (``reproduce.<key>.<profile>``), passed
in by ``calibflow/pipeline/reproduce.py``; the modules never read the file themselves.
"""
