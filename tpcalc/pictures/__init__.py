"""Pictures: memory bars, pipeline timelines and group maps, drawn with rich.

They are renderers (beside ``tpcalc.render``, which formats every number they print): each module
turns results the calculators already produced into a small, typed picture model, then into a
rich renderable. ``show`` prints them to the terminal and, with ``--save-svg``, records the same
console output as SVG (rich ``Console(record=True).save_svg``).
"""
