"""What a run scored: SPEAR's split only when the schema and count check passes (994 improvised +
1,731 naturalistic test clips, SPEAR's clip names, no repeat); anything else is custom data."""

from __future__ import annotations

import pytest

from spear_datasets.identity import (
    CUSTOM_LABEL, DataCheckError, check_counts, clip_place, data_identity, data_label, fingerprint, is_spear_data,
    spear_split_of,
)


def _split_paths(n_imp: int = 994, n_nat: int = 1731, root: str = "data/seamless_2t_2s_questions/inputs/test") -> list[str]:
    out = [f"{root}/improvised/audios/V00_S{i:04d}_I00000001_P0001A_P0002A_0.wav" for i in range(n_imp)]
    out += [f"{root}/naturalistic/audios/V01_S{i:04d}_I00000002_P0003_P0004_1.wav" for i in range(n_nat)]
    return out


def test_spear_test_split_by_count_and_names():
    paths = _split_paths()
    info = data_identity(paths, source="metadata.csv")
    assert info["label"] == "SPEAR test split" and info["spear_split"] == "test" and is_spear_data(info)
    assert info["subsets"] == {"improvised": 994, "naturalistic": 1731} and info["n_rows"] == 2725
    # the fingerprint is of the clips, not of where they are stored
    moved = [p.replace("data/seamless_2t_2s_questions", "/mnt/elsewhere") for p in paths]
    assert fingerprint(moved) == info["fingerprint"] and fingerprint(paths[:-1]) != info["fingerprint"]
    assert clip_place(paths[0]) == ("test", "improvised", paths[0].rsplit("/", 1)[1])


@pytest.mark.parametrize("paths, why", [
    (_split_paths(n_nat=1730), "naturalistic 1730"),                                  # one clip short
    (_split_paths()[:-1] + ["x/test/naturalistic/a/call_0.wav"], "not named as SPEAR's"),
    (_split_paths()[:-1] + [_split_paths()[-2]], "more than once"),
    (["demo/improvised/q0.wav", "demo/naturalistic/q1.wav"], "not all in <split>/<subset>/"),  # the demo's layout
])
def test_other_data_is_custom(paths, why):
    info = data_identity(paths)
    assert info["label"] == CUSTOM_LABEL and info["spear_split"] is None and not is_spear_data(info)
    assert why in info["check"], info["check"]
    assert data_label(info) == CUSTOM_LABEL and data_label(None) == CUSTOM_LABEL


def test_count_check_says_both_counts():
    check_counts({"improvised": 994, "naturalistic": 1731}, "test")
    with pytest.raises(DataCheckError, match=r"improvised 994, naturalistic 1700 \(2694\); SPEAR's test split has "
                                             r"improvised 994, naturalistic 1731 \(2725\)"):
        check_counts({"improvised": 994, "naturalistic": 1700}, "test")
    assert spear_split_of([])[0] is None
