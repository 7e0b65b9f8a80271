"""Chatterbox (Resemble AI, code and weights MIT) in plain torch. Under construction: T3 (t3.py) matches
upstream chatterbox-tts 0.1.7 token for token; the engine is declared (ENGINE) once S3Gen, the S3 tokenizer
and the voice encoder are in, so the registry does not list it yet."""
