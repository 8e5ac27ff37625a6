"""The ``calibflow`` command line, apart from the Prefect flows it starts.

- ``main``: the app and its top-level commands (run, repro, serve, trigger, server, report, datasets,
  validate) and ``main()``, the console script;
- ``sources``: ``init`` and ``apply``; ``scale``: ``fit`` at scale; ``export``: ``export``;
- ``monitor``: the ``calibflow monitor`` commands; ``follow``: ``trigger --wait`` following a run on the API.

The layers: the command line may import ``calibflow.flows`` and ``calibflow.pipeline``; neither of them, nor
the core library, imports the command line (tests/orchestration/test_layering.py). This ``__init__`` imports
nothing, so importing one command module does not load the whole app.
"""
