"""SPEAR ``language_dialect``: language and dialect of spoken answers."""

import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'language_dialect' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/language_dialect)"
    ) from None

_DESCRIPTION = """\
Spoken language and English dialect of answers (SPEARBench). The answer's language is
identified with facebook/mms-lid-126 (answers < 1 s or top probability < 0.5 are unknown and
excluded); English answers and their input clips get Voxlect English dialect ID
(tiantiaf/voxlect-english-dialect-whisper-large-v3, 16 classes). dialectal_entrainment_spearman
is, despite its name, the least-squares slope of answer on question dialect log-scores
(flattened, min-max normalised), as in the published table.
"""

_KWARGS_DESCRIPTION = glue.INPUTS_DOC + """\
    lid_model (str, optional): language-ID model, Hub id or local folder (default facebook/mms-lid-126).
    dialect_model (str, optional): Voxlect English dialect model, Hub id or local folder.
    english_labels (str, optional): comma list of labels that mean English (default "eng,en,english").
    dialect_labels (str, optional): comma list of dialect class names (default: checkpoint's, else Voxlect's 16).
    model_batch_size (int or 'auto', optional): clips per forward pass (default auto: 8 on CPU, from the free GPU memory on CUDA).
    model_dtype (str, optional): float32 (default, the reference), float16, bfloat16 or auto (half precision on CUDA).
Models load on the first compute(), not at evaluate.load(); a missing model fails then with a
one-line reason naming it.
Returns:
    english_answers_%, same_dialect_as_question_%, north_american_dialect_%, dialectal_entrainment_spearman, dialectal_variance, per_sample, n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/language_dialect")  # or "spearbench/language_dialect"
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class LanguageDialect(glue.SpearMetric):
    dimension = "language_dialect"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
