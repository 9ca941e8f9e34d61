"""One module per ``nwb`` subcommand; each exposes a click ``command``."""
