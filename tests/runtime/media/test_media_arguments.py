"""``clika_runtime.Tensor`` and the checks on media arguments and video sampling."""

from __future__ import annotations

import numpy as np
import pytest

import clika_runtime
from clika_runtime.media.arguments import VideoClip, audio_arrays, image_arrays, video_clips
from clika_runtime.media.video import sample_frames


def test_tensor_wraps_arrays_and_torch_tensors_read_only():
    torch = pytest.importorskip("torch")
    from_torch = clika_runtime.Tensor(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert from_torch.shape == (2, 3) and from_torch.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(from_torch), np.arange(6).reshape(2, 3))
    wrapped = clika_runtime.Tensor(np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError):
        wrapped.numpy()[0, 0] = 1
    assert clika_runtime.Tensor(wrapped).shape == (2, 2)


def test_tensor_refuses_values_that_are_not_numbers():
    with pytest.raises(TypeError, match="tensor"):
        clika_runtime.Tensor({"a": 1})


def test_images_accept_tensors_and_arrays():
    image = np.full((4, 5, 3), 7, np.uint8)
    out = image_arrays([clika_runtime.Tensor(image), image])
    assert [o.shape for o in out] == [(4, 5, 3)] * 2


@pytest.mark.parametrize(
    ("images", "error", "message"),
    [
        ([np.zeros((4, 5), np.uint8)], ValueError, r"images\[0\].*\[H, W, 3\].*\[4, 5\]"),
        ([np.zeros((4, 5, 4), np.uint8)], ValueError, r"images\[0\].*\[4, 5, 4\]"),
        ([np.zeros((4, 5, 3), np.uint8), np.zeros((4, 5, 3), np.int32)], ValueError, r"images\[1\].*int32"),
        ([np.full((2, 2, 3), 2.0, np.float32)], ValueError, r"images\[0\].*\[0, 1\]"),
        ([np.zeros((0, 5, 3), np.uint8)], ValueError, r"images\[0\].*empty"),
        (np.zeros((4, 5, 3), np.uint8), TypeError, "images must be a sequence"),
        (["not an image"], ValueError, r"images\[0\]"),
    ],
)
def test_bad_images_are_refused_naming_the_item(images, error, message):
    with pytest.raises(error, match=message):
        image_arrays(images)


def test_too_many_images_names_the_argument_and_the_limit():
    with pytest.raises(ValueError, match="images: 3 given.*at most 2"):
        image_arrays([np.zeros((2, 2, 3), np.uint8)] * 3, max_count=2)


def test_audio_checks():
    (clip,) = audio_arrays([np.zeros(16, np.float64)])
    assert clip.dtype == np.float32
    with pytest.raises(ValueError, match=r"audio\[0\].*\[S\]"):
        audio_arrays([np.zeros((16, 2), np.float32)])
    with pytest.raises(ValueError, match=r"audio\[0\].*int16"):
        audio_arrays([np.zeros(16, np.int16)])
    with pytest.raises(ValueError, match=r"audio\[0\].*finite"):
        audio_arrays([np.array([0.0, np.nan], np.float32)])


def _clip(times):
    frames = np.arange(len(times), dtype=np.uint8)[:, None, None, None] * np.ones((1, 2, 2, 3), np.uint8)
    return frames, np.asarray(times, np.float64)


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ((np.zeros((2, 4, 4, 3), np.uint8),), "pair"),
        ((np.zeros((2, 4, 4), np.uint8), np.zeros(2)), r"frames must be \[N, H, W, 3\]"),
        ((np.zeros((2, 4, 4, 3), np.uint8), np.zeros(3)), "N = 2"),
        ((np.zeros((2, 4, 4, 3), np.uint8), np.array([0.0, 0.0])), "strictly increasing"),
        ((np.zeros((2, 4, 4, 3), np.uint8), np.array([-1.0, 0.0])), "non-negative"),
    ],
)
def test_bad_videos_are_refused_naming_the_item(pair, message):
    with pytest.raises(ValueError, match=rf"videos\[0\].*{message}|{message}"):
        video_clips([pair])


def test_sampling_picks_the_frame_on_screen_at_each_instant():
    # 10 fps for 2 s; sampled at 2 fps -> instants 0, 0.5, 1.0, 1.5, 2.0 s.
    (clip,) = video_clips([_clip(np.arange(21) / 10)])
    sampled = sample_frames(clip, fps=2, max_frames=32)
    np.testing.assert_allclose(sampled.timestamps, [0.0, 0.5, 1.0, 1.5, 2.0])
    assert sampled.frames[:, 0, 0, 0].tolist() == [0, 5, 10, 15, 20]


def test_sampling_a_variable_rate_clip_keeps_real_frame_times():
    (clip,) = video_clips([_clip([0.0, 0.1, 0.9, 1.05, 2.4])])
    sampled = sample_frames(clip, fps=1, max_frames=32)
    # Instants 0, 1, 2 s show the frames stamped 0.0, 0.9 and 1.05.
    np.testing.assert_allclose(sampled.timestamps, [0.0, 0.9, 1.05])


def test_sampling_spreads_max_frames_over_the_whole_clip():
    (clip,) = video_clips([_clip(np.arange(101) / 10)])  # 10 s
    sampled = sample_frames(clip, fps=4, max_frames=5)
    np.testing.assert_allclose(sampled.timestamps, [0.0, 2.5, 5.0, 7.5, 10.0])


def test_sampling_refuses_bad_rates():
    clip = VideoClip(*_clip([0.0, 1.0]))
    with pytest.raises(ValueError, match="fps"):
        sample_frames(clip, fps=0, max_frames=4)
    with pytest.raises(ValueError, match="max_frames"):
        sample_frames(clip, fps=1, max_frames=0)
