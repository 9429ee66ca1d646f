"""What is done with a trained encoder: frozen-feature evaluation and extreme-value diagnostics.

* :mod:`realdata.frozen.evaluate` -- ``python -m realdata eval`` of a stored checkpoint;
* :mod:`realdata.frozen.diagnostics` -- POT scores and link candidates (``theory.weince``).
"""
