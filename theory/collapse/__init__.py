"""Collapse metrics: Neural Collapse (NC) versus Dimensional Collapse (DC).

Notation (docs/metrics.md#notation; the code uses the papers' symbols, ``num_classes`` for C)::

    N            number of samples;  C = num_classes classes;  d feature dimension
    z            (N, d)  features h_i as rows (the tensor the caller chose: say which)
    labels       (N,)    integer class labels >= 0;  n_c = #{i : labels_i = c}
    mu           (C, d)  uncentred class means  mu_c = (1/n_c) sum_{i in c} z_i   (matrix M)
    mu_G         (d,)    global mean.  Two are in use (docs/metrics.md#pitfalls, 3):
                           sample mean (1/N) sum_i z_i            ClassStats.global_mean
                             (Papyan et al.; Sigma_B, NC1)         global_mean(z)
                           mean of class means (1/C) sum_c mu_c   ClassStats.mean_of_class_means
                             (default of the NC2/NC3 functions)
                         they are equal for balanced classes
    mu~_c        mu_c - mu_G, centred class means (matrix M~)
    Sigma_W      (d, d)  (1/N) sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T   within-class covariance
    Sigma_B      (d, d)  (1/C) sum_c mu~_c mu~_c^T                        between-class, rank<=C-1
    W, b         (C, d), (C,)  a linear classifier h -> argmax_c (w_c . h + b_c)   (NC3, NC4)
    cos(u, v)    u.v / (||u|| ||v||)
    I, J         identity, all-ones matrix (C x C)
    sigma_i      singular values, sorted descending

Simplex ETF (the NC target): unit vectors with sum_c v_c = 0 and v_c.v_c' = -1/(C-1) (c != c');
Gram C/(C-1) (I - J/C); it exists only for d >= C - 1 (:func:`theory.geometry.simplex_etf`). The
metrics measure the distance to it for any d (with d < C - 1 they cannot reach 0).

Two families of metrics; every function says which one it is (docs/metrics.md):

* **"paper"** (:mod:`~theory.collapse.paper`) -- exactly as the HCL authors compute them in
  their notebooks (Jiang et al., arXiv 2311.05139): uncentred class means, cosines, mean
  Euclidean distance to the class mean, the spectrum of the covariance of the C class means,
  nearest-class-mean (NCM) accuracy with a raw inner product. :func:`paper_conditions`,
  :func:`within_class_variation`, :func:`class_mean_spectrum`, :func:`ncm_accuracy`.
* **"standard"** -- the literature definitions, centred at the global mean:
  :mod:`~theory.collapse.standard`: :func:`nc1` (Papyan, Han & Donoho 2020 / Han et al. 2022),
  :func:`nc1_cdnv` (Galanti et al. 2022), :func:`nc2_equinorm`, :func:`nc2_equiangularity`,
  :func:`nc2_max_angle` (Papyan et al. 2020), :func:`etf_error` (Zhu et al. 2021);
  :mod:`~theory.collapse.classifier`: :func:`nc3_self_duality` (Papyan et al.),
  :func:`nc3_self_duality_zhu` (Zhu et al.), :func:`nc4_ncc_agreement` (Papyan et al.) for a
  given linear classifier, :func:`ncm_classifier` (the NCM rules as linear classifiers);
  :mod:`~theory.collapse.rank`: :func:`effective_rank` (Roy & Vetterli 2007), :func:`rankme`
  (Garrido et al. 2023), :func:`erank_cov` (the covariance-eigenvalue variant, NOT RankMe),
  :func:`embedding_spectrum` (Jing et al. 2022, DirectCLR).

The metric row of a training run (:mod:`~theory.collapse.row`): :func:`metric_row` computes, for
one state, every column of :data:`ROW_COLUMNS` (the paper's conditions, NC1-NC2, ranks, the
class-mean spectrum, NCM accuracy), the row both experiment stacks record at every epoch.

One statistics kernel (:mod:`~theory.collapse.stats`) serves the batch metrics and the streaming
:class:`ClassStatsAccumulator` (:mod:`~theory.collapse.streaming`): :func:`class_stats` gives a
:class:`ClassStats` (counts, means, within-class sums of squares, pooled scatter);
:func:`merge_class_stats` merges two; :func:`within_class_covariance_from_stats`,
:func:`between_class_covariance_from_stats`, :func:`nc1_from_stats`, :func:`nc1_cdnv_from_stats`
work on it; :func:`class_means`, :func:`class_counts`, :func:`global_mean`,
:func:`within_class_covariance`, :func:`between_class_covariance` on raw inputs.

The HCL authors measured the **unit-ball-normalised projector outputs** of the training set
(eval mode, no augmentation), with ``d = C - 1`` (docs/metrics.md#which-tensor).

Conventions (docs/metrics.md#inputs-labels-and-missing-classes):

* inputs: torch tensors or numpy arrays (numpy wrapped without a copy), any real dtype (float16
  and bfloat16 included; bool and complex rejected), on any device; meta tensors rejected. Every
  statistic is computed in float64 on the device of the features (other arguments are moved
  there). Scalar metrics come back as Python ``float``; statistics and covariances as float64
  tensors on that device; spectra as 1-D float64 numpy arrays; :func:`class_means` in the
  container and float dtype of ``z``.
* labels: 1-D integers ``>= 0``. With ``num_classes`` given they must lie in ``[0, C)`` and row
  ``c`` is label ``c``; without it they are relabelled compactly (``C`` = number of distinct
  labels, rows in increasing label order, ``ClassStats.classes`` holds the values), so label
  values such as ``2**40`` cost no memory.
* missing classes (possible only with ``num_classes``): statistics give NaN means (never zero)
  and count 0; metrics that average over classes raise ``ValueError`` naming them;
  :meth:`ClassStats.present` excludes them explicitly.
* invalid inputs (shapes, dtypes, NaN/inf, labels out of range, too few classes for a metric,
  an undefined metric such as NC1 with coinciding class means) raise ``ValueError`` naming the
  argument.
* scale (docs/metrics.md#scale): no metric squares raw features; it divides them by a power of
  two first, so the scale-invariant metrics are right at any scale (``effective_rank(1e308 *
  I_3) == 3``) and a scale-dependent value beyond the float64 range raises ``ValueError`` naming
  ``z`` or ``mu`` instead of returning inf or NaN.
"""

from theory.collapse.classifier import (
    nc3_self_duality,
    nc3_self_duality_zhu,
    nc4_ncc_agreement,
    ncm_classifier,
)
from theory.collapse.paper import class_mean_spectrum, ncm_accuracy, paper_conditions, within_class_variation
from theory.collapse.rank import RANKME_EPS, effective_rank, embedding_spectrum, erank_cov, rankme
from theory.collapse.row import (
    NCM_TOP_K,
    RANK_COLUMNS,
    RANK_THRESHOLDS,
    ROW_COLUMNS,
    MetricRow,
    metric_row,
    numerical_ranks,
    spectrum_columns,
)
from theory.collapse.standard import (
    etf_error,
    nc1,
    nc1_cdnv,
    nc1_cdnv_from_stats,
    nc1_from_stats,
    nc2_equiangularity,
    nc2_equinorm,
    nc2_max_angle,
)
from theory.collapse.stats import (
    SPECTRUM_FLOOR,
    ClassStats,
    between_class_covariance,
    between_class_covariance_from_stats,
    class_counts,
    class_means,
    class_stats,
    global_mean,
    merge_class_stats,
    within_class_covariance,
    within_class_covariance_from_stats,
)
from theory.collapse.streaming import ClassStatsAccumulator

__all__ = [
    "SPECTRUM_FLOOR",
    "RANKME_EPS",
    # statistics kernel
    "ClassStats",
    "class_stats",
    "merge_class_stats",
    "class_means",
    "class_counts",
    "global_mean",
    "within_class_covariance",
    "between_class_covariance",
    "within_class_covariance_from_stats",
    "between_class_covariance_from_stats",
    # "paper" variant
    "paper_conditions",
    "within_class_variation",
    "class_mean_spectrum",
    "ncm_accuracy",
    # "standard" variant
    "nc1",
    "nc1_from_stats",
    "nc1_cdnv",
    "nc1_cdnv_from_stats",
    "nc2_equinorm",
    "nc2_equiangularity",
    "nc2_max_angle",
    "etf_error",
    "nc3_self_duality",
    "nc3_self_duality_zhu",
    "nc4_ncc_agreement",
    "ncm_classifier",
    # rank and spectra
    "effective_rank",
    "rankme",
    "erank_cov",
    "embedding_spectrum",
    "numerical_ranks",
    # streaming
    "ClassStatsAccumulator",
    # the metric row of a training run
    "ROW_COLUMNS",
    "RANK_THRESHOLDS",
    "RANK_COLUMNS",
    "NCM_TOP_K",
    "spectrum_columns",
    "MetricRow",
    "metric_row",
]
