"""Full-Duplex-Bench v2 (``DanielLin94144/Full-Duplex-Bench``, ``v2/``): live multi-turn
conversations between an examiner and any network adapter (:mod:`.engine`), the tasks file
(:mod:`.tasks`) and the scoring (:mod:`.score`). See docs/full-duplex-bench-v2.md."""
