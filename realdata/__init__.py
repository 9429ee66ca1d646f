"""Real-data experiments: vision datasets, encoders, views and frozen-feature evaluation.

Modules (import what you need; nothing heavy is imported here):

* :mod:`realdata.datasets`: CIFAR-10/100, Tiny-ImageNet-200, STL-10 from local folders in their
  standard layouts and the bundled scikit-learn digits, as one in-memory
  :class:`~realdata.datasets.ImageDataset` of ``uint8`` tensors; registry ``DATASETS``.
* :mod:`realdata.views`: the hard-negative authors' single normalised view and label positives.
* :mod:`realdata.augment`: batched two-view SimCLR augmentation on the device (WeiNCE recipe).
* :mod:`realdata.samplers`: shuffled ``drop_last`` batches and class-balanced batches.
* :mod:`realdata.models`: ResNet-18/50 (CIFAR or standard stem), a small CNN for digits, the
  HCL head and the WeiNCE projector; ``build_model`` returns ``(h, z)`` models.
* :mod:`realdata.evaluate`: feature extraction, NCM, linear probe (:mod:`realdata.probe`),
  weighted kNN and Recall@k (:mod:`realdata.knn`).

Papers: hard negatives and collapse (arXiv 2311.05139, Sec. 5), WeiNCE (arXiv 2606.00262, Sec. 5).
"""
