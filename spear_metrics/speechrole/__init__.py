"""SpeechRole-Eval (Jiang et al., arXiv 2508.02013; ``yuhui1038/SpeechRole``, MIT): speech
role-playing agents judged pairwise against the roles' reference speech by an audio LLM.

- :mod:`.protocol`: the aspects, prompt texts, message layout and reply parsers (v1, v2);
- :mod:`.data`: the test data, model-output folders and their dialogue-by-dialogue check;
- :mod:`.judging`: ``spearbench speechrole score`` (resumable, concurrent judge calls);
- :mod:`.aggregate`: judge results on disk -> dialogue rows -> summary with intervals;
- :mod:`.infer`: ``spearbench speechrole infer`` (any adapter, turn by turn);
- :mod:`.results`: SpeechRole runs as results datasets (``push-results``, the Space).
"""
