"""The leaderboard Space: ``app.py`` (gradio Blocks, over ``tables.py``, ``samples.py`` and ``plots.py``,
which the Space imports from the installed ``spearbench`` wheel), its card (``README.md``), its pinned
``requirements.txt`` and ``packages.txt``, and the published table in ``data/``.

``python -m spear_metrics.space [--results SRC ...]`` runs it here; ``spearbench publish`` (or
``scripts/build_space.py``) assembles the folder that runs on Hugging Face Spaces unchanged.
"""

from pathlib import Path

#: This folder: the Space's files as they are uploaded (``app.py``, ``README.md``, ``data/``...).
SPACE_DIR = Path(__file__).resolve().parent
#: The files and folders of :data:`SPACE_DIR` that make the Space (nothing else is uploaded).
SPACE_FILES = ("app.py", "README.md", "requirements.txt", "packages.txt", "data")
