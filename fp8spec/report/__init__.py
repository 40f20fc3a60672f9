"""`fp8spec report`: read what a run of a compiled bundle left and say whether FP8 was on, healthy and paying.

sources (what RUN is: a log, a folder, an archive) -> logs (located events) -> steps (the per-step table) ->
verdicts (registered checks, each a unit with a code like a rule) -> render (text, JSON) and figure (SVG, PNG).
"""
