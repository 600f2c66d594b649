"""SPEAR ``stances``: stance of spoken answers relative to the question."""

import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'stances' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/stances)"
    ) from None

_DESCRIPTION = """\
Stance of spoken answers (SPEARBench, SPEAR's STANCE protocol). For each (row, stance question)
pair whose answerer's role or category fits the question, an audio LLM judge behind an
OpenAI-compatible chat API hears the question clip and the answer patched onto one track and
rates the answerer's stance from -2 to +2; the reference is +2/-2 from the answerer's category.
stance_same_as_question_% = share of pairs with the same sign as the reference,
stance_more_negative_% / stance_more_positive_% = share lower / higher (after SPEAR's
orientation of four labels).
"""

_KWARGS_DESCRIPTION = glue.INPUTS_DOC + """\
    stance_questions (str): path of the STANCE questions JSON ({"outside_judge": [...]}).
    stance_assets (str): folder holding interactions_role_ABmapped.csv (and relationships.csv).
    stance_category_roles (str, optional): the category -> roles CSV.
    judge_url (str): OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 (the judge options are the
        shared ones: judge_key_env, judge_timeout_s, judge_retries, judge_seed, judge_cache...).
    judge_model (str, optional): model name the server expects (default gpt-audio-2025-08-28).
Models load on the first compute(), not at evaluate.load(); a missing model fails then with a
one-line reason naming it.
Returns:
    stance_same_as_question_%, stance_more_negative_%, stance_more_positive_%, per_sample, n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/stances")  # or "spearbench/stances"
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Stances(glue.SpearMetric):
    dimension = "stances"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
