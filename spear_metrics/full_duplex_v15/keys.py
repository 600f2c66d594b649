"""The declared summary keys of Full-Duplex-Bench v1.5 (:class:`spear_metrics.core.dimension.MetricKey`).

``published=True``: named and computed as upstream's code (``DanielLin94144/Full-Duplex-Bench``,
``v1_v1.5/evaluation/``) names and computes them; ``False``: the project's keys beside them."""

from __future__ import annotations

from spear_metrics.core.dimension import MetricKey

GROUP = "Full-Duplex-Bench v1.5"

_TAGS = {
    "C_RESPOND": "the model addresses the overlap's content",
    "C_RESUME": "the model ignores the overlap and continues its answer",
    "C_UNCERTAIN_HANDLING": "the model signals it could not hear or understand",
    "C_UNKNOWN": "off-target or no speech after the overlap",
}
#: upstream's before/after features: name -> (unit, description)
_FEATURES = {
    "wpm": ("words/min", "words / ((last word end - first word start) / 60) of the segment's ASR words (0 when that span is <= 0)"),
    "speech_dur_s": ("s", "last word end - first word start of the segment's ASR words"),
    "mean_pitch": ("Hz", "mean F0 of voiced frames (Praat to_pitch, 0.01 s, 50-600 Hz) of the Silero-trimmed segment"),
    "std_pitch": ("Hz", "standard deviation (ddof 1) of that F0"),
    "mean_intensity": ("dB", "mean Praat intensity (0.01 s frames above -200 dB) of the Silero-trimmed segment"),
    "std_intensity": ("dB", "standard deviation (ddof 1) of that intensity"),
    "utmosv2": ("MOS 1-5", "UTMOSv2 of the Silero-trimmed segment: always null here (`unsupported: ...`: its weights "
                           "download at first use); see `<side>_DNSMOS_<part>`"),
}


def _keys() -> tuple[MetricKey, ...]:
    out = [MetricKey(tag, "fraction", "task_dependent",
                     f"share of the judged samples' tags that are {tag} ({what}); LLM judge with upstream's "
                     "behavior.txt on the four word-timed transcripts (eval_behavior.py); upstream prints it rounded "
                     "to 2 decimals (`behaviour_ratios_upstream`)", group=GROUP, published=True, order=i + 1)
           for i, (tag, what) in enumerate(_TAGS.items())]
    out += [
        MetricKey("stop_latency_s", "s", "lower",
                  "mean over samples of the length of the first interval of upstream's `latency_stop_list` "
                  "(get_timing.py: user and model Silero segments intersected) that meets the overlap window",
                  group=GROUP),
        MetricKey("response_latency_s", "s", "lower",
                  "mean over samples of model start - user end of the first interval of upstream's "
                  "`latency_resp_list` whose user end is at or after the overlap start", group=GROUP),
    ]
    order = len(out)
    for side, what in (("pre", "the reply before the overlap's end (word-aligned split)"),
                       ("post", "the reply from the split on")):
        for k, (unit, desc) in _FEATURES.items():
            order += 1
            out.append(MetricKey(f"{side}_{k}", unit, "task_dependent",
                                 f"{what}: {desc}; 5 % trimmed mean over samples (eval_general_before_after.py, "
                                 "agg trim 0.05)", group=GROUP, published=True, order=order))
    for k, (unit, desc) in _FEATURES.items():
        out.append(MetricKey(f"clean_{k}", unit, "task_dependent",
                             f"the reply to clean_input.wav: {desc}; 5 % trimmed mean over samples (upstream computes "
                             "it per sample but aggregates only pre and post)", group=GROUP))
    for side in ("pre", "post", "clean"):
        out.append(MetricKey(f"{side}_cutoff_count", "count", "lower",
                             f"{side} segment: upstream's detect_sudden_cutoffs (30 ms frames, a drop of >= 18 dB from a "
                             "frame >= 6 dB above the recent floor), off in upstream's evaluate.py; 5 % trimmed mean",
                             group=GROUP))
        out.append(MetricKey(f"{side}_DNSMOS_<part>", "MOS 1-5", "higher",
                             f"{side} segment, Silero-trimmed: the project's offline MOS (DNSMOS P.835/P.808 from "
                             "speechmos, or another --mos backend under its own name), not UTMOSv2; 5 % trimmed mean",
                             group=GROUP))
    return tuple(out)


KEYS: tuple[MetricKey, ...] = _keys()
