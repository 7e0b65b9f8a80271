"""The script layer's engine-independent core: the script format (`parse`), SRT files (`srt`), placing
cue audio on a timeline (`timeline`) and pitch-preserving time-stretch (`stretch`).

Nothing here imports an engine or the node plumbing: it is plain text, numbers and tensors, so the
Script and SRT nodes and the Speak pipeline can share one parser and one timing rule.
"""
