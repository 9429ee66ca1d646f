"""Collapse metrics: Neural Collapse (NC) versus Dimensional Collapse (DC).

Two families of metrics live here (spec/metrics.md §1). Every function says which one it is:

* **"paper"** (:mod:`~theory.collapse.paper`) -- exactly as the HCL authors compute them in their
  notebooks (spec/hcl.md §6, spec/metrics.md §2): uncentred class means, cosines, mean Euclidean
  distance to the class mean, the spectrum of the covariance of the C class means,
  nearest-class-mean (NCM) accuracy with a raw inner product. :func:`class_means`,
  :func:`paper_conditions`, :func:`within_class_variation`, :func:`class_mean_spectrum`,
  :func:`ncm_accuracy`.
* **"standard"** (:mod:`~theory.collapse.standard`, :mod:`~theory.collapse.rank`) -- the
  literature definitions (spec/metrics.md §3), centred at the global mean: :func:`nc1` (Papyan et
  al. 2020 / Han et al. 2022), :func:`nc1_cdnv` (Galanti et al. 2022), :func:`nc2_equinorm`,
  :func:`nc2_equiangularity`, :func:`nc2_max_angle` (Papyan et al. 2020), :func:`etf_error` (Zhu
  et al. 2021), :func:`effective_rank` (Roy & Vetterli 2007), :func:`rankme` (Garrido et al.
  2023), :func:`erank_cov` (the covariance-eigenvalue variant, NOT RankMe),
  :func:`embedding_spectrum` (Jing et al. 2022, DirectCLR).

Both families and the streaming :class:`ClassStatsAccumulator` (:mod:`~theory.collapse.streaming`)
share one statistics kernel (:mod:`~theory.collapse.stats`): :func:`class_means`,
:func:`class_counts`, :func:`global_mean`, :func:`within_class_covariance`,
:func:`between_class_covariance`.

The metrics are computed on whatever tensor the caller passes. The HCL authors used the
**unit-ball-normalised projector outputs** of the training set (eval mode, no augmentation),
with ``d = C - 1``; say which tensor you pass when you report a number (spec/metrics.md pitfall 6).

Notation (spec/metrics.md §0; DESIGN.md)::

    N            number of samples;  C number of classes;  d feature dimension
    z            (N, d)  features h_i as rows (the tensor the caller chose)
    labels       (N,)    integer class labels in [0, C);  n_c = #{i : labels_i = c}
    mu           (C, d)  uncentred class means  mu_c = (1/n_c) sum_{i in c} z_i   (matrix M)
    mu_G         (d,)    global mean = (1/N) sum_i z_i  (sample mean, Papyan et al.); equals the
                         mean of the class means only for balanced classes (pitfall 3)
    mu~_c        mu_c - mu_G, centred class means (matrix M~)
    Sigma_W      (d, d)  (1/N) sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T   within-class covariance
    Sigma_B      (d, d)  (1/C) sum_c mu~_c mu~_c^T                        between-class, rank<=C-1
    cos(u, v)    u.v / (||u|| ||v||)
    I, J         identity, all-ones matrix (C x C)
    sigma_i      singular values, sorted descending

Simplex ETF (the NC target): unit vectors with sum_c v_c = 0 and v_c.v_c' = -1/(C-1) (c != c');
Gram C/(C-1) (I - J/C); needs d >= C - 1 (:func:`theory.geometry.simplex_etf`).

Conventions of this module:

* inputs are torch tensors or numpy arrays (any float dtype; half precision is fine); every
  statistic is computed in float64 on the input's device; scalar metrics come back as Python
  ``float``; spectra come back as 1-D float64 numpy arrays;
* ``labels`` must be integers in ``[0, C)``; ``C`` is ``num_classes`` when given, otherwise
  ``labels.max() + 1``; a class with no sample raises ``ValueError`` (a mean would be undefined);
* invalid inputs (non-2-D features, non-finite values, label/feature length mismatch, labels out
  of range, feature-dimension mismatch, empty class) raise ``ValueError`` naming the argument.
"""

from theory.collapse.paper import class_mean_spectrum, ncm_accuracy, paper_conditions, within_class_variation
from theory.collapse.rank import RANKME_EPS, effective_rank, embedding_spectrum, erank_cov, rankme
from theory.collapse.standard import (
    etf_error,
    nc1,
    nc1_cdnv,
    nc2_equiangularity,
    nc2_equinorm,
    nc2_max_angle,
)
from theory.collapse.stats import (
    SPECTRUM_FLOOR,
    between_class_covariance,
    class_counts,
    class_means,
    global_mean,
    within_class_covariance,
)
from theory.collapse.streaming import ClassStatsAccumulator

__all__ = [
    "SPECTRUM_FLOOR",
    "RANKME_EPS",
    # statistics
    "class_means",
    "class_counts",
    "global_mean",
    "within_class_covariance",
    "between_class_covariance",
    # "paper" variant
    "paper_conditions",
    "within_class_variation",
    "class_mean_spectrum",
    "ncm_accuracy",
    # "standard" variant
    "nc1",
    "nc1_cdnv",
    "nc2_equinorm",
    "nc2_equiangularity",
    "nc2_max_angle",
    "etf_error",
    # rank and spectra
    "effective_rank",
    "rankme",
    "erank_cov",
    "embedding_spectrum",
    # streaming
    "ClassStatsAccumulator",
]
