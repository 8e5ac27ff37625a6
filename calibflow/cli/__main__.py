"""``python -m calibflow.cli``: the ``calibflow`` command (for tests and environments without the script)."""

from calibflow.cli.main import main

if __name__ == "__main__":
    main()
