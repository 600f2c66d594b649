"""The batched Silero backend against upstream's streaming call, on real speech."""

import numpy as np
import pytest

from spear_datasets.audio import load_audio
from spear_metrics.core import vad

from conftest import REAL, STEREO_DIALOGUE

TURN_TAKING = dict(threshold=0.5, min_speech_duration_ms=100, min_silence_duration_ms=50)


def _channels():
    x = load_audio(STEREO_DIALOGUE, channels="keep")  # 16 kHz stereo, one AMI speaker per channel, 31 s
    jfk = load_audio(REAL / "faster-whisper__jfk.flac", channels="mix")  # 44.1 kHz 24-bit, resampled
    return {"FEE016": x[0], "MEO015": x[1], "mix": x.mean(0), "jfk": jfk[0]}


def test_batched_probabilities_follow_the_streaming_model(real_dir):
    for name, x in _channels().items():
        ref = vad.speech_probabilities(x, backend="jit")
        got = vad.speech_probabilities(x, backend="batched")
        assert got.shape == ref.shape == (-(-len(x) // 512),), name
        # the same weights and operations; batched kernels only sum in another order
        assert np.abs(got - ref).max() < 5e-5, name
        # real speech and real silence both occur: the comparison is not of a constant
        assert ref.max() > 0.9 and ref.min() < 0.1, name


def test_batched_segments_equal_upstream_call(real_dir):
    for name, x in _channels().items():
        for kw in (dict(return_seconds=True), dict(return_seconds=True, time_resolution=3), TURN_TAKING):
            assert vad.speech_timestamps(x, backend="batched", **kw) == vad.speech_timestamps(x, backend="jit", **kw), (name, kw)
    # a known utterance: MEO015's "Right" starts the answer channel after 15.46 s (the test_interruptions clip)
    meo = _channels()["MEO015"]
    segs = vad.speech_segments(meo[int(15.46 * 16000):], backend="batched", time_resolution=3)
    assert segs[0][0] < 0.15 and segs[1][0] == pytest.approx(6.114, abs=0.032)


def test_batched_values_do_not_depend_on_threads_or_calls(real_dir):
    import torch

    x = _channels()["mix"]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = vad.speech_probabilities(x, backend="batched")
        torch.set_num_threads(2)
        two = vad.speech_probabilities(x, backend="batched")
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(one, two)  # 1 and 2 processes write the same files
    np.testing.assert_array_equal(one, vad.speech_probabilities(x, backend="batched"))  # no state kept between calls
    # a signal longer than a block (2048 frames = 65.5 s) carries the LSTM state across blocks
    long = np.concatenate([x, x, x])
    p = vad.speech_probabilities(long, backend="batched")
    assert len(p) > vad._model("batched").block_frames
    assert np.abs(p - vad.speech_probabilities(long, backend="jit")).max() < 5e-5


def test_dense_encoder_is_the_convolutions_on_real_frames(real_dir):
    """The batched pass's encoder (each Conv1d as one dense matrix over a frame's 4 STFT columns)
    computes what ``F.conv1d`` computes, on real speech frames, up to the order of the sums; and
    the matrices hold each weight where its tap lands and zeros where the tap reads padding."""
    import torch

    F = torch.nn.functional
    model = vad._model("batched")
    x = _channels()["mix"]
    n = -(-len(x) // 512)
    with torch.inference_mode():
        mags = model._magnitudes(model._frames(model._signal(x, n), 0, n))  # (n, 4, 129)
        ref, got = mags.transpose(1, 2), mags.reshape(n, -1)
        for (w, b, stride), (m, bias) in zip(model.convs, model._dense):
            ref = F.relu(F.conv1d(ref, w, b, stride, 1))  # the streaming model's layer
            got = torch.addmm(bias, got, m).relu_()
            assert torch.allclose(got, ref.transpose(1, 2).reshape(n, -1), rtol=1e-5, atol=1e-5)
            assert float(ref.abs().max()) > 0.1  # real activations, not zeros
        # first layer: input column 3 feeds output columns 2 and 3 only (taps 2 and 1); output 0 reads
        # columns 0 and 1 (taps 1 and 2), its tap 0 falls on the padding
        w = model.convs[0][0]
        m = model._dense[0][0].reshape(4, 129, 4, 128)
        assert torch.equal(m[3, :, 3], w[:, :, 1].t()) and torch.equal(m[3, :, 2], w[:, :, 2].t())
        assert not m[3, :, :2].any() and torch.equal(m[0, :, 0], w[:, :, 1].t()) and torch.equal(m[1, :, 0], w[:, :, 2].t())
    # the probabilities stay within the margin's reach of upstream's; the segments are upstream's
    # (test_batched_segments_equal_upstream_call)
    p = vad.speech_probabilities(x, backend="batched")
    assert np.abs(p - vad.speech_probabilities(x, backend="jit")).max() < vad.EXACT_MARGIN / 4


def test_paired_kernels_are_the_one_frame_kernel_bit_for_bit(real_dir):
    """The guard's recompute reads real frames through the kernel the once-per-process check
    picked: all pairs in one bmm, one mm per pair, or one frame per sgemm give the same bits
    wherever the check picked the paired kernel."""
    import torch

    model = vad._model("batched")
    x = _channels()["FEE016"][: 512 * 200]
    with torch.inference_mode():
        frames = model._frames(model._signal(x, 200), 0, 200)
        z = model._conv_exact(frames, model.basis, None, 128, 0)  # fills the check for the STFT
        key = (tuple(model.basis.shape), 128, 0, frames.shape[-1], True)
        assert vad.BatchedSilero._PAIR_KERNEL[key] in ("bmm", "pairs", "native")
        native = vad._native_conv1d(frames, model.basis, None, 128, 0)
        assert torch.equal(z, native)
        if vad.BatchedSilero._PAIR_KERNEL[key] == "bmm":
            assert torch.equal(vad._paired_bmm_conv1d(frames, model.basis, None, 128, 0), native)
        mag = torch.sqrt(torch.pow(native[:, :129], 2) + torch.pow(native[:, 129:], 2))
        w, b, stride = model.convs[0]
        assert torch.equal(model._conv_exact(mag, w, b, stride, 1), vad._native_conv1d(mag, w, b, stride, 1))
        assert float(mag.abs().max()) > 0.1


def test_short_and_empty_audio():
    assert vad.speech_probabilities(np.zeros(0, np.float32), backend="batched").shape == (0,)
    assert vad.speech_segments(np.zeros(0, np.float32)) == []
    p = vad.speech_probabilities(np.zeros(100, np.float32), backend="batched")  # one zero-padded frame
    assert p.shape == (1,) and p[0] == pytest.approx(vad.speech_probabilities(np.zeros(100, np.float32), backend="jit")[0], abs=5e-5)
    with pytest.raises(ValueError, match="unknown VAD backend 'onnx'"):
        vad.speech_segments(np.zeros(16000, np.float32), backend="onnx")


def test_light_dimensions_run_torch_ops_on_one_thread_and_restore_it():
    import torch

    from spear_metrics.core.scoring import _one_op_thread

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with _one_op_thread(light=True):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with _one_op_thread(light=False):  # a model-based group keeps the cores
            assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), _one_op_thread(light=True):
            raise RuntimeError("a failing dimension")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def _near_threshold_gain(x: np.ndarray, threshold: float = 0.5) -> tuple[float, int]:
    """A gain of ``x`` and a frame whose probability by upstream's streaming call, computed here
    on this machine, lies within a hundredth of EXACT_MARGIN of ``threshold``: the frames of
    the signal at gains 0.2 and 0.3 that cross the threshold between them, the first of them,
    then bisection of the gain on that frame (a frame depends only on the audio before it, so
    each step runs the streaming model over the prefix up to the frame)."""
    lo, hi = 0.2, 0.3
    p_lo = vad.speech_probabilities((x * lo).astype(np.float32), backend="jit")
    p_hi = vad.speech_probabilities((x * hi).astype(np.float32), backend="jit")
    crossing = np.flatnonzero((p_lo - threshold) * (p_hi - threshold) < 0)
    assert len(crossing), "no frame crosses the threshold between the two gains"
    f = int(crossing[0])
    below_at_lo = p_lo[f] < threshold
    prefix = x[: (f + 1) * 512]
    for _ in range(60):
        mid = (lo + hi) / 2
        p = vad.speech_probabilities((prefix * mid).astype(np.float32), backend="jit")[f]
        if abs(p - threshold) < vad.EXACT_MARGIN / 100:
            return mid, f
        if (p < threshold) == below_at_lo:
            lo = mid
        else:
            hi = mid
    raise AssertionError(f"no gain puts frame {f} within {vad.EXACT_MARGIN / 100} of {threshold}")


def test_a_frame_at_the_threshold_decides_as_upstream(real_dir):
    """The mix of the AMI dialogue's first 12 s at the gain that puts one frame's streaming
    probability at the 0.5 threshold on THIS machine (searched at test time: the last bits of a
    probability depend on the CPU's kernels, e.g. 0.5000001 on one CPU and 0.4999974 on an
    AVX-512 one at the same gain). The batched kernels can then land on either side of the
    threshold; frames within EXACT_MARGIN of a threshold are recomputed as upstream computes
    them, so the segments are upstream's whichever side they land on."""
    x = load_audio(STEREO_DIALOGUE, channels="keep").mean(0)[: 16000 * 12]
    gain, f = _near_threshold_gain(x)
    y = (x * gain).astype(np.float32)
    jit = vad.speech_probabilities(y, backend="jit")
    raw = vad.speech_probabilities(y, backend="batched")
    assert abs(jit[f] - 0.5) < vad.EXACT_MARGIN and abs(raw[f] - 0.5) < vad.EXACT_MARGIN  # the case is real here
    model = vad._model("batched")
    np.testing.assert_array_equal(model.exact_probabilities(y, len(jit)).astype(np.float64), jit)  # bit for bit
    for kw in (dict(return_seconds=True), dict(return_seconds=True, time_resolution=3), TURN_TAKING):
        assert vad.speech_timestamps(y, backend="batched", **kw) == vad.speech_timestamps(y, backend="jit", **kw), kw


def test_audio_beyond_full_scale_decides_as_upstream(real_dir):
    """int16 values written into a float file (the loader keeps them): the batched error grows
    with the amplitude past the margin, so such audio takes the exact path whole."""
    x = load_audio(STEREO_DIALOGUE, channels="keep").mean(0)[:16000 * 12]
    y = (x * 32240).astype(np.float32)
    raw = vad.speech_probabilities(y, backend="batched")
    jit = vad.speech_probabilities(y, backend="jit")
    assert np.abs(raw - jit).max() > vad.EXACT_MARGIN  # the margin would not hold here
    for kw in (dict(return_seconds=True), TURN_TAKING):
        assert vad.speech_timestamps(y, backend="batched", **kw) == vad.speech_timestamps(y, backend="jit", **kw), kw


def test_exact_path_is_upstreams_call_bit_for_bit(real_dir, monkeypatch):
    """The guard's recompute on whole real recordings (odd and even frame counts), called with
    two torch threads (it runs on one, as upstream), through both of its kernels: two frames per
    sgemm where the once-per-process check allows it, and one frame per sgemm."""
    import torch

    model = vad._model("batched")
    chans = _channels()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        for name, x in chans.items():
            jit = vad.speech_probabilities(x, backend="jit")
            np.testing.assert_array_equal(model.exact_probabilities(x, len(jit)).astype(np.float64), jit, err_msg=name)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    # one pairing check per convolution (5: the STFT and four encoder layers). Here, MKL on
    # AVX-512, the first three pass (all pairs in one bmm) and the two m = 1 layers (its
    # matrix-vector path) do not; another BLAS may decide otherwise, and the bits above hold either way
    assert len(vad.BatchedSilero._PAIR_KERNEL) == 5
    x = chans["jfk"][: 512 * 101]  # 101 frames: the odd last frame takes the one-frame kernel
    jit = vad.speech_probabilities(x, backend="jit")
    np.testing.assert_array_equal(model.exact_probabilities(x, 101).astype(np.float64), jit)
    checked = dict(vad.BatchedSilero._PAIR_KERNEL)
    # each kernel the check can pick gives the same bits where it picked a paired one
    for other in ("pairs", "native"):
        monkeypatch.setattr(vad.BatchedSilero, "_PAIR_KERNEL",
                            {k: other if v != "native" else v for k, v in checked.items()})
        np.testing.assert_array_equal(model.exact_probabilities(x, 101).astype(np.float64), jit, err_msg=other)
    monkeypatch.setattr(vad.BatchedSilero, "_PAIR_KERNEL", {k: "native" for k in checked})
    np.testing.assert_array_equal(model.exact_probabilities(x, 101).astype(np.float64), jit)
    # the once-per-process end-to-end check passed here; where it fails, frame-by-frame calls
    # take over, with the same bits
    assert vad.BatchedSilero._EXACT_HOLDS is True
    monkeypatch.setattr(vad.BatchedSilero, "_EXACT_HOLDS", False)
    np.testing.assert_array_equal(model.exact_probabilities(x, 101).astype(np.float64), jit)
    # blocks: the LSTM state carried from one block of frames to the next
    monkeypatch.setattr(vad.BatchedSilero, "_EXACT_HOLDS", True)
    monkeypatch.setattr(model, "block_frames", 16)
    np.testing.assert_array_equal(model.exact_probabilities(x, 101).astype(np.float64), jit)


def test_stereo_is_refused_not_flattened(real_dir):
    """A (2, n) array run end to end as one channel would find speech that is not there in time."""
    x = load_audio(STEREO_DIALOGUE, channels="keep")
    for call in (vad.speech_timestamps, vad.speech_probabilities, vad.speech_segments):
        with pytest.raises(ValueError, match=r"VAD needs mono audio, got shape \(2, "):
            call(x)
    # (1, n) is mono: the same result as (n,)
    assert vad.speech_timestamps(x[:1]) == vad.speech_timestamps(x[0]) != []


def test_samples_far_beyond_audio_scale_fail_instead_of_reading_as_silence(real_dir):
    """Silero's float32 STFT power overflows past ~7e16: NaN probabilities would read as "no
    speech". Such input is refused with its peak; int16 values written as floats are still VAD'd."""
    x = load_audio(STEREO_DIALOGUE, channels="mix")[0][:16000 * 5]
    x = (x / np.abs(x).max()).astype(np.float32)
    import torch

    jit = vad._model("jit")  # the failure this prevents is real: upstream's model gives NaN there
    jit.reset_states()
    speechy = int(np.argmax([np.abs(x[i:i + 512]).max() for i in range(0, x.size - 512, 512)])) * 512
    assert torch.isnan(jit(torch.from_numpy(x[speechy:speechy + 512] * np.float32(1e20)), 16000)).all()
    jit.reset_states()
    with pytest.raises(ValueError, match=r"peaks at 1e\+18, above 1e\+16"):
        vad.speech_timestamps(x * np.float32(1e18))
    with pytest.raises(ValueError, match="VAD input holds NaN or inf samples"):
        vad.speech_segments(np.where(np.arange(x.size) == 7, np.nan, x).astype(np.float32))
    assert vad.speech_timestamps(x * np.float32(32768)) == vad.speech_timestamps(x * np.float32(32768), backend="jit") != []
