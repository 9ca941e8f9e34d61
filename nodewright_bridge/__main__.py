"""``python -m nodewright_bridge`` runs the ``nwb`` CLI where the console script is not on PATH."""

from nodewright_bridge.cli import main

if __name__ == "__main__":
    main()
