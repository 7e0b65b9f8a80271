"""`python -m mizuoto doctor` prints the memory check; bad settings are clear errors."""
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "mizuoto", *args], capture_output=True, text=True, timeout=120)


def test_doctor_prints_the_memory_check():
    r = run("doctor", "--setting", "compute.simulate_vram_mb=512", "--setting", "compute.vram_mode=low")
    assert r.returncode == 0, r.stderr
    for line in ("mode           low", "reserve cpu    0 MB", "host copies", "pin budget", "copy streams",
                 "oom retry      on", "oom fallback   off", "allocator"):
        assert line in r.stdout
    assert "simulated" in r.stdout and "of        512 MB" in r.stdout


def test_doctor_rejects_unknown_and_bad_settings(capsys):
    from mizuoto.cli import main

    assert main(["doctor", "--setting", "compute.vram_mod=low"]) == 2
    assert "did you mean 'compute.vram_mode'" in capsys.readouterr().err
    assert main(["doctor", "--setting", "compute.gpu_jobs=zero"]) == 2
    err = capsys.readouterr().err
    assert "'compute.gpu_jobs'" in err and "expected an integer" in err


def test_speak_writes_a_plausible_wav(tmp_path):
    """The README's main job: speech from text with the embedded voice, no download."""
    import wave

    import numpy as np

    text = "Hello from Mizuoto. This voice runs inside ComfyUI."
    out = tmp_path / "hello.wav"
    r = run("speak", text, "-o", str(out), "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert '"streamed_mb"' in r.stdout
    with wave.open(str(out)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768
    seconds = len(pcm) / 24000
    assert 0.03 < seconds / len(text) < 0.15  # speech is roughly 10-25 characters per second
    rms = np.sqrt(np.mean(pcm ** 2))
    assert 0.01 < rms < 0.5


def test_speak_on_a_simulated_gpu_streams_and_reports(tmp_path, capsys):
    from mizuoto.cli import main

    assert main(["speak", "Streaming keeps every sample.", "-o", str(tmp_path / "a.wav"), "--simulate-vram-mb", "10"]) == 0
    assert '"reason": "budget"' in capsys.readouterr().out


def test_speak_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "x.wav"
    for args, message in [(["  "], "text: empty"), (["...!?"], "nothing speakable"),
                          (["Hi.", "--speed", "0"], "--speed: expected 0.25 to 4.0 for this model")]:
        code, err = speak_in_process(capsys, *args, "-o", str(out))
        assert code == 2 and message in err[0], err
        assert list(folder.iterdir()) == []


def speak_in_process(capsys, *args):
    """`mizuoto speak ...` in this process: (exit code, stderr lines). An uncaught exception (what would
    print a traceback) fails the test."""
    from mizuoto.cli import main

    code = main(["speak", *args])
    return code, capsys.readouterr().err.strip().splitlines()


def test_an_argument_error_imports_no_engine_and_no_torch():
    code = ("import sys\nfrom mizuoto.cli import main\ntry:\n    main(['speak'])\nexcept SystemExit as e:\n"
            "    print(e.code, 'torch' in sys.modules, [m for m in sys.modules if m.startswith('mizuoto.nodes.')])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["2", "False", "[]"], r.stdout + r.stderr
    assert "-o/--output" in r.stderr


def test_reference_files_of_the_common_formats_are_read(tmp_path):
    """Float, 24-bit WAVE_FORMAT_EXTENSIBLE, FLAC and MP3 references; 16-bit PCM read as its integers
    (what the pipeline scales exactly as soundfile does)."""
    import numpy as np
    import soundfile
    import torch

    from mizuoto.cli import read_audio
    from mizuoto.nodes.pack.audio import to_float

    t = np.arange(16000) / 16000
    tone = (0.5 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    for name, fmt, subtype, dtype in [("f.wav", "WAV", "FLOAT", torch.float32), ("x.wav", "WAVEX", "PCM_24", torch.int32),
                                      ("p.wav", "WAV", "PCM_16", torch.int16), ("a.flac", "FLAC", "PCM_16", torch.int16),
                                      ("m.mp3", "MP3", "MPEG_LAYER_III", torch.float32)]:
        path = tmp_path / name
        soundfile.write(path, np.stack([tone, tone], axis=1), 16000, format=fmt, subtype=subtype)
        wav, rate = read_audio(str(path))
        assert rate == 16000 and wav.dtype == dtype and wav.shape[0] == 2, name
        if fmt == "MP3":        # lossy, with the encoder's delay: only its length
            assert wav.shape[1] > 15000, name
            continue
        assert wav.shape[1] == 16000, name
        assert float((to_float(wav[0]) - torch.from_numpy(tone)).abs().max()) < 1e-4, name   # 16-bit quantisation
    pcm = (tone * 32767).round().astype("<i2")
    soundfile.write(tmp_path / "p.wav", pcm, 16000, subtype="PCM_16")
    wav, _ = read_audio(str(tmp_path / "p.wav"))
    assert torch.equal(wav[0], torch.from_numpy(pcm))


def test_unreadable_references_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "notes.wav").write_text("not audio at all\n" * 10)
    (tmp_path / "empty.wav").write_bytes(b"")
    for name in ("notes.wav", "empty.wav", "missing.wav"):
        code, err = speak_in_process(capsys, "Hi.", "-o", str(tmp_path / "o.wav"), "--reference", str(tmp_path / name))
        assert code == 2 and len(err) == 1 and f"--reference {tmp_path / name}: cannot be read as audio" in err[0], err
    assert not (tmp_path / "o.wav").exists()


def test_messages_name_the_command_line_flags(tmp_path, capsys):
    import numpy as np
    import soundfile

    ref = tmp_path / "ref.wav"
    soundfile.write(ref, np.zeros(24000, dtype=np.float32) + 0.1, 24000)
    code, err = speak_in_process(capsys, "Hi.", "-o", str(tmp_path / "o.wav"), "--reference", str(ref))
    assert code == 2 and err[0].startswith("speak: --reference: this model cannot clone a voice; leave it out"), err
    assert "reference_audio" not in err[0] and "unconnected" not in err[0]
    code, err = speak_in_process(capsys, "Hi.", "-o", str(tmp_path / "o.wav"), "--instruction", "whisper")
    assert code == 2 and err == ["speak: --instruction: this model takes no instruction; leave it out"], err


def test_a_missing_model_says_where_it_looked_and_what_it_knows(tmp_path, capsys, monkeypatch):
    models = tmp_path / "models"
    monkeypatch.setenv("MIZUOTO_MODELS_DIR", str(models))
    monkeypatch.setenv("MIZUOTO_HUB_MIRROR", str(tmp_path / "empty-mirror"))
    (tmp_path / "empty-mirror").mkdir()
    out = str(tmp_path / "o.wav")
    code, err = speak_in_process(capsys, "Hi.", "-o", out, "--engine", "f5_tts")
    assert code == 2 and len(err) == 1, err
    assert str(models / "f5_tts") in err[0] and "$MIZUOTO_MODELS_DIR" in err[0], err
    assert "F5TTS_v1_Base" in err[0] and "--download" in err[0], err
    code, err = speak_in_process(capsys, "Hi.", "-o", out, "--engine", "f5_tts", "--model", "F5TTS_v1_Base")
    assert code == 2 and err == [f"speak: --model F5TTS_v1_Base: not downloaded yet; add --download to fetch it "
                                 f"into {models / 'f5_tts' / 'F5TTS_v1_Base'}"], err
    code, err = speak_in_process(capsys, "Hi.", "-o", out, "--engine", "f5_tts", "--model", "F5TTS_v1_Base",
                                 "--download")
    assert code == 2 and "could not be downloaded" in err[0] and any("vocos/" in e for e in err[1:]), err
    code, err = speak_in_process(capsys, "Hi.", "-o", out, "--engine", "nope")
    assert code == 2 and err[0].startswith("speak: --engine 'nope': not an engine of this pack; expected one of"), err
    assert not (tmp_path / "o.wav").exists()


def test_a_missing_embedded_voice_package_is_its_message_alone(tmp_path, capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "hibari" else find_spec(name, *a))
    code, err = speak_in_process(capsys, "Hi.", "-o", str(tmp_path / "o.wav"))
    assert code == 2 and len(err) == 1 and "pip install --no-deps hibari-tts==0.2.1" in err[0], err


def test_words_the_embedded_voice_cannot_read_are_named(tmp_path, capsys):
    code, err = speak_in_process(capsys, "Hello Καλημέρα and こんにちは, friends.", "-o", str(tmp_path / "o.wav"))
    assert code == 0, err
    warnings = [e for e in err if "warning" in e]
    assert len(warnings) == 1 and "'Καλημέρα'" in warnings[0] and "'こんにちは'" in warnings[0], err
    code, err = speak_in_process(capsys, "Hello friends, café in Zürich.", "-o", str(tmp_path / "o.wav"))
    assert code == 0 and not [e for e in err if "warning" in e], err


def test_a_tiny_simulated_gpu_never_reports_negative_memory(tmp_path, capsys, caplog):
    code, err = speak_in_process(capsys, "Hi there.", "-o", str(tmp_path / "o.wav"), "--simulate-vram-mb", "1")
    assert code == 1 and "out of memory" in err[-1], err
    import re

    text = "\n".join(r.getMessage() for r in caplog.records) + "\n".join(err)
    assert "0 MB available" in text and not re.search(r"-\d+ MB", text), text


def test_engine_options_are_passed_and_checked_as_declared(tmp_path, capsys):
    """--option KEY=VALUE reaches SpeakRequest.options typed (numbers, true/false, text, audio files) and the
    pipeline's declared ranges check it; on the embedded voice (no options) every option is refused."""
    import numpy as np
    import soundfile

    from mizuoto.cli import _options

    audio = tmp_path / "emo.flac"
    soundfile.write(audio, np.zeros(1600, dtype=np.int16), 16000, subtype="PCM_16")
    parsed = _options(["steps=4", "cfg_strength=2.5", "do_sample=false", "method=midpoint",
                       f"emotion_reference={audio}"])
    assert parsed["steps"] == 4 and parsed["cfg_strength"] == 2.5 and parsed["do_sample"] is False
    assert parsed["method"] == "midpoint" and parsed["emotion_reference"]["sample_rate"] == 16000
    assert parsed["emotion_reference"]["waveform"].shape == (1, 1, 1600)
    code, err = speak_in_process(capsys, "Hi.", "-o", str(tmp_path / "o.wav"), "--option", "steps=4")
    assert code == 2 and err == ["speak: --option: ['steps'] are not options of this model; expected some of []"], err
    code, err = speak_in_process(capsys, "Hi.", "-o", str(tmp_path / "o.wav"), "--option", "steps")
    assert code == 2 and err == ["speak: --option expects KEY=VALUE, got 'steps'"], err
    (tmp_path / "bad.wav").write_text("x")
    code, err = speak_in_process(capsys, "Hi.", "-o", str(tmp_path / "o.wav"), "--option",
                                 f"emotion_reference={tmp_path / 'bad.wav'}")
    assert code == 2 and err[0].startswith(f"speak: --option emotion_reference {tmp_path / 'bad.wav'}: cannot"), err


def test_an_engine_option_out_of_its_range_names_the_flag(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("f5_tiny_cli", Path(__file__).parent / "f5_tts" / "tiny.py")
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    folder = tiny.write_tiny_checkpoint(tmp_path / "f5", seed=1)
    import numpy as np
    import soundfile

    ref = tmp_path / "ref.wav"
    soundfile.write(ref, (0.1 * np.sin(np.arange(12000) / 7)).astype(np.float32), 24000)
    code, err = speak_in_process(capsys, "Hello.", "-o", str(tmp_path / "o.wav"), "--engine", "f5_tts",
                                 "--model", str(folder), "--reference", str(ref), "--reference-text", "Some words.",
                                 "--option", "steps=100000")
    assert code == 2 and err[0].startswith("speak: --option: steps") and "256" in err[0], err


def test_an_incomplete_model_folder_names_what_it_lacks(tmp_path, capsys):
    """Every engine with model folders: an empty folder's error lists the files it needs; with them all
    present but one, exactly that one."""
    from mizuoto.nodes.pack.registry import discover

    for spec in discover():
        if spec.embedded:
            continue
        folder = tmp_path / spec.engine_id
        folder.mkdir()
        missing = spec.missing_files(folder)
        assert missing and not spec.is_model_folder(folder), spec.engine_id
        code, err = speak_in_process(capsys, "Hi.", "-o", str(tmp_path / "o.wav"), "--engine", spec.engine_id,
                                     "--model", str(folder))
        assert code == 2 and f"not a complete {spec.display_name} model folder; missing {missing[0]}" in err[0], err


def test_speak_stream_writes_the_same_wav_and_streams_to_standard_output(tmp_path):
    """--stream writes the WAV as the audio is made: the finished file is byte-for-byte the plain run's;
    -o - is a WAV stream on standard output (sizes unknown in the header, as players read it) holding the
    same samples, with the report on standard error."""
    from mizuoto.cli import main

    text = "Streaming changes nothing. Every sample stays the same. A third sentence."
    assert main(["speak", text, "-o", str(tmp_path / "plain.wav")]) == 0
    assert main(["speak", text, "-o", str(tmp_path / "streamed.wav"), "--stream"]) == 0
    plain = (tmp_path / "plain.wav").read_bytes()
    assert (tmp_path / "streamed.wav").read_bytes() == plain
    # The standard-output stream is compared with a plain run in a fresh process too: this process's earlier
    # tests may have changed the intra-op thread count, and kernels split their sums by it.
    assert run("speak", text, "-o", str(tmp_path / "plain_process.wav")).returncode == 0
    plain = (tmp_path / "plain_process.wav").read_bytes()
    r = subprocess.run([sys.executable, "-m", "mizuoto", "speak", text, "-o", "-", "--stream"], capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout[:4] == b"RIFF" and r.stdout[4:8] == b"\xff\xff\xff\xff" and r.stdout[40:44] == b"\xff\xff\xff\xff"
    assert r.stdout[44:] == plain[44:] and r.stdout[8:40] == plain[8:40]
    assert b"wrote standard output" in r.stderr and b"first audio after" in r.stderr
    r = run("speak", "Hi.", "-o", "-")
    assert r.returncode == 2 and "add --stream" in r.stderr
