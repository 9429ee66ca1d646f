"""The mathematics of the project: tensors in, numbers out (no training loops, files or plots).

Subpackages:

* :mod:`theory.hcl` -- the hard-negative paper (arXiv 2311.05139): psi family, tilted sampling,
  batch losses, closed-form optima, Harris checks, cvxpy Gram programs, sympy derivations;
* :mod:`theory.weince` -- WeiNCE (arXiv 2606.00262): T_lambda logits, the rho / dAIC gate, the
  released-recipe state, the loss; extreme-value tools (GPD/POT/GEV, tail-AIC fits, link
  selection, noise floor) that do not depend on the loss;
* :mod:`theory.collapse` -- Neural / Dimensional Collapse metrics: the paper's conditions,
  NC1-NC2, spectra and ranks, the streaming accumulator.

Shared modules: :mod:`theory.options` (option literals and defaults), :mod:`theory.validation`,
:mod:`theory.geometry` (normalize, simplex_etf), :mod:`theory.infonce` (two-view InfoNCE),
:mod:`theory.claims` (the claims record), :mod:`theory.claims.checks` (the runner of
``python -m theory``).
"""
