"""SPEAR's distributional baselines and SPEARBench's ``human_likeness_auroc`` (see ``definition.py``)."""
