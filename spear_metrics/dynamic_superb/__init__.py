"""Dynamic-SUPERB Phase-2 in SPEARBench: task instances and their manifest (:mod:`.tasks`), the
metrics and the judge protocol (:mod:`.metrics`), inference through the shared adapters into
upstream's prediction files (:mod:`.infer`), scoring with intervals and N/A rates
(:mod:`.scoring`), results datasets (:mod:`.results`) and the evaluate module
(``dynamic_superb.py``)."""
