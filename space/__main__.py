"""``python -m spear_metrics.space [--results SRC ...]``: run the leaderboard Space here."""

from spear_metrics.space.app import main

main()
