"""``python -m servesim``: the same as the ``servesim`` command."""

from servesim.cli import main

if __name__ == "__main__":
    main()
